#!/usr/bin/env bash
# corpus.sh: the SmolLM2 draft's self-distilled training data, kept in the repository as token ids
# (data/corpus/smollm2/PART/: meta.txt, with the target's SHA-256 and the settings, and the datagen shards,
# xz-compressed). The parts and their recipes are the table below (docs/training.md: data D, E and F).
#   corpus.sh generate [PART...]  run tokens-only datagen for the parts (default: all, in order) into
#                                 build/corpus/PART, resuming from what is there and from the committed
#                                 shards; each shard is packed into data/corpus as it completes (commit it)
#   corpus.sh unpack [DIR]        the committed shards as datagen directories under DIR (build/corpus),
#                                 each checked against SHA256SUMS; then DIR/all merges the parts present
#   corpus.sh pack [PART...]      pack the finished shards of build/corpus now (generate does it as it goes)
#   corpus.sh status              shards per part, committed and to go
#   corpus.sh ingest DIR          parts packed on another machine (DIR/PART/: meta.txt, SHA256SUMS, shard xz files,
#                                 as gpu_check.sh's step corpus brings them back) into data/corpus, each shard
#                                 checked against its SHA-256; a part already here must have the same meta.txt
#   corpus.sh train [OUT]         a SmolLM2 draft from the committed corpus alone (a clone needs nothing else):
#                                 unpack beside OUT (its folder's corpus/), then `beagle train` from scratch with the
#                                 shipped draft's flags (docs/training.md, "Retraining from the corpus");
#                                 resumes from OUT.ckpt after a kill. OUT: build/corpus-train/beagle-smollm2-135m.bin
# Environment: THREADS (datagen and train -t, default 2), NICE (default 19: a background run yields to other
# work); generate: BIN (the beagle binary, default build/beagle, made first; build/beagle-cuda runs datagen on
# the GPU), BATCH (sequences decoded together, default 32; the shards do not depend on it); train: EPOCHS1,
# EPOCHS2 (stage 1 and 2 epochs, default 4 and 1), MAX_STEPS (0: every epoch), EVAL
# (held-out MT-Bench turns evaluated at the end, default 10; 0: none), ARCH (beagle, eagle, medusa or moa;
# moa reads the target's layers 22 and 27 besides its last, as in docs/paper-comparison.md), LR_DECAY
# (train --lr-decay, default 0), TRAIN_PARTS (the parts to train on, default: every committed part; data D
# of docs/training.md is the eight d-* parts), STATES=1 (compute the target's states once per part, datagen
# --states-of, beside the unpacked corpus, and train on them: each later epoch saves a prefill of every
# token, which on two CPU threads costs more than the step; 1.16 GB per million tokens, 3.5 GB with MoA's layers).
set -euo pipefail
cd "$(dirname "$0")/.."
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
C=data/corpus/smollm2
B=${BIN:-build/beagle}
tr=data/train
sg=$tr/sharegpt_sg90k_first_sampled_sorted.json
v3=$tr/sharegpt_v3_filtered_1000.json
THREADS=${THREADS:-2}
NICE=${NICE:-19}
gen="-n 256 --max-prompt 256 --shard-seqs 64"
# PART | datagen arguments (besides -m, -t, --batch and -o): greedy answers first, then the sampled ones; the g-*
# parts are large, for a GPU (gpu_check.sh's step corpus): self-written conversations (Magpie) and more samples
# of the prompts here. A part is resumed on the backend that began it (its meta.txt says which).
PARTS="
d-sg90k-greedy|$gen --prompts $sg
d-v3-greedy|$gen --prompts $v3
d-selfinstruct-greedy|$gen --prompts $tr/selfinstruct_seed_tasks.jsonl
d-gsm8k-greedy|$gen --prompts $tr/gsm8k_train.jsonl --limit 3000
d-sg90k-t07a|$gen --prompts $sg --temp 0.7 --seed 21
d-v3-t07a|$gen --prompts $v3 --temp 0.7 --seed 22
d-sg90k-t05b|$gen --prompts $sg --temp 0.5 --seed 31
d-v3-t05b|$gen --prompts $v3 --temp 0.5 --seed 32
e-sg90k-t07c|$gen --prompts $sg --temp 0.7 --seed 41
e-v3-t07c|$gen --prompts $v3 --temp 0.7 --seed 42
e-gsm8k-rest-greedy|$gen --prompts $tr/gsm8k_train.jsonl --skip 3000
e-self|$gen --self-prompts 8000 --max-prompt 128 --seed 51
g-self-a|$gen --self-prompts 30000 --max-prompt 128 --seed 61
g-sg90k-t07d|$gen --prompts $sg --temp 0.7 --seed 62
g-v3-t07d|$gen --prompts $v3 --temp 0.7 --seed 63
g-gsm8k-t07|$gen --prompts $tr/gsm8k_train.jsonl --temp 0.7 --seed 64
g-self-b|$gen --self-prompts 30000 --max-prompt 128 --seed 65
"
part_args() { echo "$PARTS" | awk -F'|' -v p="$1" '$1 == p {print $2}'; }
part_names() { echo "$PARTS" | awk -F'|' 'NF == 2 {print $1}'; }

# SRC's shard-*.bin.xz decompressed into DST (those not there yet), then DST checked against SRC/SHA256SUMS;
# fails (status 1) on a file that is not xz or a shard that differs
unpack_shards() {
  local src=$1 dst=$2 z f sums
  sums=$(cd "$src" && pwd)/SHA256SUMS
  for z in "$src"/shard-*.bin.xz; do
    [ -e "$z" ] || continue
    f=$dst/$(basename "$z" .xz)
    [ -f "$f" ] || { xz -dc "$z" > "$f.tmp" && mv "$f.tmp" "$f"; } || return 1
  done
  (cd "$dst" && sha256sum -c --quiet --strict "$sums")
}

# DIR/PART: the committed shards decompressed (and checked), beside what a datagen run there already wrote
unpack_part() {
  local part=$1 dir=$2
  [ -f "$C/$part/meta.txt" ] || return 0
  mkdir -p "$dir/$part"
  [ -f "$dir/$part/meta.txt" ] || cp "$C/$part/meta.txt" "$dir/$part/meta.txt"
  unpack_shards "$C/$part" "$dir/$part" || { echo "corpus: $dir/$part: shards differ from $C/$part/SHA256SUMS" >&2; exit 1; }
}

# every committed part under DIR (unpack_part; TRAIN_PARTS: only these), then DIR/all: the parts merged
unpack_all() {
  local dir=$1 part have=()
  for part in ${TRAIN_PARTS:-$(part_names)}; do
    [ -f "$C/$part/meta.txt" ] || continue
    unpack_part "$part" "$dir"
    have+=("$dir/$part")
  done
  [ ${#have[@]} -gt 0 ] || { echo "corpus: nothing committed under $C" >&2; exit 1; }
  bash scripts/merge_data.sh "$dir/all" "${have[@]}"
}

# the shards of build/corpus/PART not yet in data/corpus, compressed; SHA256SUMS of the uncompressed shards
pack_part() {
  local part=$1 dir=build/corpus/$1 n=0
  [ -f "$dir/meta.txt" ] && compgen -G "$dir/shard-*.bin" > /dev/null || return 0
  mkdir -p "$C/$part"
  cp "$dir/meta.txt" "$C/$part/meta.txt"
  for f in "$dir"/shard-*.bin; do
    [ -e "$f" ] || continue
    local z=$C/$part/$(basename "$f").xz
    [ -f "$z" ] && continue
    xz -9e -c "$f" > "$z.tmp" && mv "$z.tmp" "$z"
    n=$((n + 1))
  done
  (cd "$dir" && sha256sum shard-*.bin) | while read -r sum name; do
    [ -f "$C/$part/$name.xz" ] && echo "$sum  $name"
  done > "$C/$part/SHA256SUMS.tmp"
  # SHA256SUMS lists the uncompressed shards: check with unpack (or xz -dc shard | sha256sum)
  mv "$C/$part/SHA256SUMS.tmp" "$C/$part/SHA256SUMS"
  register_part "$part"
  [ $n -eq 0 ] || echo "corpus: $part: $n shard(s) packed into $C/$part"
}

# data/ rules (test_self_contained.py): a licence in every folder, every data file in data/SHA256SUMS
register_part() {
  for d in data/corpus "$C" "$C/$1"; do cp data/corpus/LICENSE.corpus "$d/LICENSE.corpus" 2> /dev/null || true; done
  { grep -v '  corpus/' data/SHA256SUMS; (cd data && sha256sum corpus/smollm2/*/meta.txt corpus/smollm2/*/shard-*.bin.xz); } \
    > data/SHA256SUMS.tmp && mv data/SHA256SUMS.tmp data/SHA256SUMS
}

# DIR/PART packed elsewhere: every shard checked against DIR/PART/SHA256SUMS (and against this part's own list
# where it has the shard), the meta.txt equal to this part's if it has one; then the new shards join data/corpus
ingest_part() {
  local src=$1 part
  part=$(basename "$src")
  fail() { echo "corpus: ingest $src: $*" >&2; exit 1; }
  [ -n "$(part_args "$part")" ] || fail "'$part' is not a part of this corpus (parts: $(part_names | tr '\n' ' '))"
  [ -f "$src/meta.txt" ] && [ -f "$src/SHA256SUMS" ] || fail "expected meta.txt and SHA256SUMS there"
  [ ! -f "$C/$part/meta.txt" ] || cmp -s "$C/$part/meta.txt" "$src/meta.txt" ||
    fail "its meta.txt differs from $C/$part/meta.txt (another recipe, target or backend): $(diff "$C/$part/meta.txt" "$src/meta.txt" | tr '\n' ' ')"
  compgen -G "$src/shard-*.bin.xz" > /dev/null || fail "no shard-*.bin.xz files"
  local tmp
  tmp=$(mktemp -d)
  # every shard listed, every listed shard there and equal
  { unpack_shards "$src" "$tmp" && [ "$(ls "$tmp" | wc -l)" -eq "$(grep -c . "$src/SHA256SUMS")" ]; } ||
    { rm -rf "$tmp"; fail "the shards differ from its SHA256SUMS"; }
  rm -rf "$tmp"
  if [ -f "$C/$part/SHA256SUMS" ]; then  # a shard both lists hold must be the same shard
    local clash
    clash=$(awk 'NR == FNR {have[$2] = $1; next} ($2 in have) && have[$2] != $1 {print $2}' "$C/$part/SHA256SUMS" "$src/SHA256SUMS")
    [ -z "$clash" ] || fail "shards other than the committed ones of the same names: $clash"
  fi
  mkdir -p "$C/$part"
  cp "$src/meta.txt" "$C/$part/meta.txt"
  local n=0
  for z in "$src"/shard-*.bin.xz; do
    [ -f "$C/$part/$(basename "$z")" ] && continue
    cp "$z" "$C/$part/" && n=$((n + 1))
  done
  local lists=("$src/SHA256SUMS"); [ -f "$C/$part/SHA256SUMS" ] && lists+=("$C/$part/SHA256SUMS")
  sort -u -k2,2 "${lists[@]}" > "$C/$part/SHA256SUMS.tmp"
  mv "$C/$part/SHA256SUMS.tmp" "$C/$part/SHA256SUMS"
  register_part "$part"
  echo "corpus: $part: $n new shard(s) ingested from $src"
}

case "${1:-}" in
  generate)
    shift
    parts=("$@"); [ ${#parts[@]} -gt 0 ] || mapfile -t parts < <(part_names)
    [ -n "${BIN:-}" ] || make -j2 build/beagle
    [ -f "$M" ] || bash scripts/fetch_model.sh
    command -v xz > /dev/null || { echo "corpus: xz not found (apt-get install xz-utils)" >&2; exit 1; }
    for part in "${parts[@]}"; do
      args=$(part_args "$part")
      [ -n "$args" ] || { echo "corpus: no part '$part' (parts: $(part_names | tr '\n' ' '))" >&2; exit 1; }
      mkdir -p build/corpus
      unpack_part "$part" build/corpus
      # datagen writes one shard at a time; a watcher packs each as it lands, and the end packs the rest
      ( while sleep 60; do pack_part "$part"; done ) & watcher=$!
      # shellcheck disable=SC2086
      nice -n "$NICE" "$B" datagen -m "$M" -t "$THREADS" --batch "${BATCH:-32}" $args -o "build/corpus/$part" ||
        { kill $watcher; exit 1; }
      kill $watcher 2> /dev/null || true
      pack_part "$part"
    done ;;
  unpack)
    unpack_all "${2:-build/corpus}" ;;
  pack)  # what generate packs as it goes, for the parts given (default: all)
    shift
    parts=("$@"); [ ${#parts[@]} -gt 0 ] || mapfile -t parts < <(part_names)
    for part in "${parts[@]}"; do pack_part "$part"; done ;;
  ingest)
    [ -d "${2:-}" ] || { echo "usage: corpus.sh ingest DIR (DIR/PART/ folders)" >&2; exit 2; }
    command -v xz > /dev/null || { echo "corpus: xz not found (apt-get install xz-utils)" >&2; exit 1; }
    for d in "$2"/*/; do ingest_part "${d%/}"; done ;;
  status)
    for part in $(part_names); do
      n=$(compgen -G "$C/$part/shard-*.bin.xz" | wc -l || true)  # a part not started has no folder
      items=$(awk '$1 == "items" {print $2}' "$C/$part/meta.txt" 2> /dev/null || true)
      per=$(awk '$1 == "shard_seqs" {print $2}' "$C/$part/meta.txt" 2> /dev/null || true)
      total=$([ -n "$items" ] && echo $(((items + per - 1) / per)) || echo "?")
      bytes=$(cat "$C/$part"/shard-*.bin.xz 2> /dev/null | wc -c || true)
      printf "%-24s %4s of %4s shards committed, %6.2f MB\n" "$part" "$n" "$total" "$(echo "${bytes:-0} / 1000000" | bc -l)"
    done ;;
  train)
    out=${2:-build/corpus-train/beagle-smollm2-135m.bin}
    dir=$(dirname "$out")/corpus
    make -s -j2 build/beagle
    [ -f "$M" ] || bash scripts/fetch_model.sh
    unpack_all "$dir"
    resume=(); [ -f "$out.ckpt" ] && resume=(--resume "$out.ckpt")
    arch=(--arch "${ARCH:-beagle}"); layers=()
    [ "${ARCH:-beagle}" = moa ] && layers=(--state-layers 22,27) && arch+=("${layers[@]}")
    data=$dir/all
    if [ "${STATES:-0}" = 1 ]; then  # per part (a part's states outlive a change of TRAIN_PARTS), resumable
      sdir=$dir/states$([ ${#layers[@]} -gt 0 ] && echo -l22-27) have=()
      mkdir -p "$sdir"
      for part in ${TRAIN_PARTS:-$(part_names)}; do
        [ -f "$dir/$part/meta.txt" ] || continue
        nice -n "$NICE" "$B" datagen -m "$M" -t "$THREADS" --states-of "$dir/$part" "${layers[@]}" -o "$sdir/$part"
        have+=("$sdir/$part")
      done
      bash scripts/merge_data.sh "$sdir/all" "${have[@]}"
      data=$sdir/all
    fi
    eval_args=(); [ "${EVAL:-10}" -gt 0 ] && eval_args=(--eval-prompts data/eval/mt_bench_question.jsonl --eval-n "${EVAL:-10}" --eval-tokens 128)
    # the shipped draft's flags (weights/beagle-smollm2-135m.bin.json), from scratch: reduced vocabulary chosen
    # from this data, stage 1 window 2, stage 2 two simulated steps, vloss weight 1 (SmolLM2's large states)
    nice -n "$NICE" "$B" train -m "$M" --data "$data" -o "$out" --ckpt "$out.ckpt" "${resume[@]}" -t "$THREADS" "${arch[@]}" \
        --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 3e-3 --draft-vocab 8192 --loss-on-prompt --vloss-weight 1 \
        --stage1-epochs "${EPOCHS1:-4}" --stage2-epochs "${EPOCHS2:-1}" --lr-decay "${LR_DECAY:-0}" \
        --max-steps "${MAX_STEPS:-0}" --seed 1 "${eval_args[@]}" ;;
  *)
    sed -n 2,28p "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

#!/usr/bin/env bash
# test_medusa_train.sh: `beagle train --arch medusa` (Medusa-1 heads, docs/method.md section 4b) end to end on
# stories260K: a short run writes a draft whose config says arch medusa and its K, with finite losses and the
# trainer's evaluation (taus); a checkpoint resumes; `generate -d` with it (chain and tree, --temp 0) prints plain
# greedy's text, `info` names it (and shows its checkpoint), a draft, checkpoint or data shard given as -m is
# refused naming what it is, and `generate --plan` lists the drafter's buffers; `generate --accept typical` runs at a temperature and is refused at 0, with
# --spec none and with an unknown rule; `bench-sd --accept typical` reports its mismatches without failing; flags
# that do not apply to Medusa heads are refused with a clear message. (Gradients: test_gradcheck.sh; the drafter:
# test_medusa_draft, test_spec_sampling; memory: test_stage2_memory.)
set -u
cd "$(dirname "$0")/../.."
B=${BEAGLE_BIN:-build/beagle}
M=$PWD/data/models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
. "$(dirname "$0")/expect_error.sh"
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
"$B" datagen "${T[@]}" --sample 24 -n 100 --shard-seqs 12 -o "$tmp/x" -t 1 2> /dev/null || bad "datagen"
TR=("$B" train "${T[@]}" --data "$tmp/x" --arch medusa --stage1-epochs 1 --stage2-epochs 1 --batch 4 --seq-len 128 -t 1 -q)
"${TR[@]}" --medusa-heads 3 -o "$tmp/m.bin" --ckpt-every 3 --eval-prompts test/data/stories_prompts.txt --eval-n 3 --eval-tokens 32 \
    > "$tmp/log" 2>&1 && ok "train --arch medusa --medusa-heads 3" || { bad "train"; cat "$tmp/log"; }
python3 - "$tmp/m.bin" <<'PY' && ok "summary: arch medusa, K 3, finite losses, taus" || bad "summary"
import json, math, sys
j = json.load(open(sys.argv[1] + ".json"))
rows = [l.split() for l in open(sys.argv[1] + ".loss.tsv").readlines()[1:]]
loss = [float(r[2]) for r in rows]
print("arch", j["arch"], "K", j["config"].get("medusa_heads"), "steps", len(loss), "tau", j.get("tau_chain"), j.get("tau_tree"))
sys.exit(0 if j["arch"] == "medusa" and str(j["config"].get("medusa_heads")) == "3" and loss and
         all(math.isfinite(x) and x > 0 for x in loss) and j["tau_chain"] >= 1 and j["tau_tree"] >= 1 else 1)
PY
grep -aq "medusa_heads 3" "$tmp/m.bin" && ok "the draft file records medusa_heads 3" || bad "no medusa_heads line"
"${TR[@]}" --medusa-heads 3 -o "$tmp/m.bin" --ckpt-every 3 --resume "$tmp/m.bin.ckpt" > "$tmp/log2" 2>&1 && ok "resume" || { bad "resume"; cat "$tmp/log2"; }
expect_error "resume with another K" "medusa_heads" "${TR[@]}" --medusa-heads 2 -o "$tmp/m.bin" --resume "$tmp/m.bin.ckpt"
G=(generate "${T[@]}" -p "Once upon a time" -n 40 -t 1 --no-stream)
"$B" "${G[@]}" --temp 0 > "$tmp/plain" 2> /dev/null
for spec in chain tree; do
  if "$B" "${G[@]}" --temp 0 -d "$tmp/m.bin" --spec $spec --total-tokens 20 > "$tmp/sd" 2> "$tmp/err" && cmp -s "$tmp/sd" "$tmp/plain"; then
    ok "generate -d medusa --spec $spec: plain greedy's text"
  else bad "generate -d medusa --spec $spec"; cat "$tmp/err"; fi
done
"$B" generate "${T[@]}" -d "$tmp/m.bin" --plan model > "$tmp/plan" 2>&1 && grep -q "Medusa heads W, b" "$tmp/plan" && ! grep -q "draft K/V" "$tmp/plan" \
  && ok "generate --plan: the Medusa drafter's buffers" || { bad "generate --plan"; cat "$tmp/plan"; }
"$B" info "$tmp/m.bin" > "$tmp/info" 2>&1 && grep -q "arch medusa" "$tmp/info" && grep -q "medusa_w" "$tmp/info" && ok "info" || { bad "info"; cat "$tmp/info"; }
"$B" info "$tmp/m.bin.ckpt" > "$tmp/info" 2>&1 && grep -q "training checkpoint" "$tmp/info" && grep -q "arch  *medusa" "$tmp/info" \
  && grep -q "^  step  *[0-9]" "$tmp/info" && grep -q "history: *[0-9]* steps, the last: loss" "$tmp/info" \
  && ok "info on the checkpoint: its run and state" || { bad "info on the checkpoint"; cat "$tmp/info"; }
for f in "m.bin|is a Beagle draft file, not a target model" "m.bin.ckpt|is a training checkpoint, not a model" \
         "x/$(cd "$tmp/x" && ls -- *.bin | head -1)|is a datagen shard, not a model"; do
  expect_error "generate -m ${f%%|*}" "${f#*|}" "$B" generate -m "$tmp/${f%%|*}" -z "$M/tok512.bin" -p "Once" -n 2
done
"$B" "${G[@]}" --temp 0.7 -d weights/medusa-stories260K.bin --spec tree --total-tokens 60 --accept typical --json > /dev/null 2> "$tmp/err" \
  && grep -q '"tau"' "$tmp/err" && ok "generate --accept typical" || { bad "generate --accept typical"; cat "$tmp/err"; }
expect_error "typical at temperature 0" "--accept typical needs --temp > 0" "$B" "${G[@]}" --temp 0 -d "$tmp/m.bin" --accept typical
expect_error "typical without speculation" "--accept typical is a rule of local speculative decoding" "$B" "${G[@]}" --spec none --accept typical
expect_error "unknown rule" "--accept must be exact or typical, got 'lossy'" "$B" "${G[@]}" --accept lossy
"$B" bench-sd "${T[@]}" -d weights/medusa-stories260K.bin --prompts test/data/stories_prompts.txt --per-category 3 --no-chat -n 32 \
    --modes none,tree --total-tokens 60 --accept typical --temp 0.7 -t 1 > "$tmp/b.json" 2> "$tmp/err" \
  && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['accept'] == 'typical' and j['overall']['tree']['tau'] > 1 else 1)" "$tmp/b.json" \
  && ok "bench-sd --accept typical: lossy, not an error" || { bad "bench-sd --accept typical"; tail -3 "$tmp/err"; }
expect_error "bench-sd --temp without typical" "--temp goes with --accept typical" "$B" bench-sd "${T[@]}" -d "$tmp/m.bin" --prompts test/data/stories_prompts.txt --temp 0.5
expect_error "--medusa-heads without --arch medusa" "add --arch medusa" "$B" train "${T[@]}" --data "$tmp/x" -o "$tmp/z.bin" --medusa-heads 3
expect_error "--medusa-heads 0" "--medusa-heads must be in 1..16"  "${TR[@]}" --medusa-heads 0 -o "$tmp/z.bin"
expect_error "medusa --sim-grad-through" "a Medusa draft has one objective"  "${TR[@]}" -o "$tmp/z.bin" --sim-grad-through
expect_error "medusa --ttt" "trains an EAGLE draft"  "${TR[@]}" -o "$tmp/z.bin" --ttt
expect_error "medusa --state-layers" "state layers are a Beagle or MoA draft's"  "${TR[@]}" -o "$tmp/z.bin" --state-layers 1
expect_error "medusa --plan" "no plan for --arch medusa" "$B" train --plan 7b --arch medusa
expect_error "--init of another K" "a Medusa draft of 3 heads, this run trains 2"  "${TR[@]}" --medusa-heads 2 -o "$tmp/z.bin" --init "$tmp/m.bin"
echo "$fails failures"
[ $fails -eq 0 ]

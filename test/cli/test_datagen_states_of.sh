#!/usr/bin/env bash
# test_datagen_states_of.sh: `beagle datagen --states-of DIR` stores the target's states of tokens-only data:
# its shards equal, byte for byte, those `datagen --keep-states` writes for the same answers (plain and with
# --state-layers; so training on them gives the draft training on the tokens gives, test_train_from_tokens.sh),
# a removed shard is written again the same (resume), and data that keeps states, another model's data,
# --prompts and a layer the target lacks are refused with a clear error. Planted: other answers' shards differ
# (the comparison can fail).
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
G=(--sample 24 -n 100 --shard-seqs 8 -t 1)
"$B" datagen "${T[@]}" "${G[@]}" -o "$tmp/t" 2> "$tmp/log" || { bad "datagen (tokens)"; cat "$tmp/log"; }
"$B" datagen "${T[@]}" "${G[@]}" --keep-states -o "$tmp/s" 2> "$tmp/log" || { bad "datagen --keep-states"; cat "$tmp/log"; }
"$B" datagen "${T[@]}" "${G[@]}" --keep-states --state-layers 1,3 -o "$tmp/sx" 2> "$tmp/log" || { bad "datagen --state-layers"; cat "$tmp/log"; }

same_shards() {  # DIR_A DIR_B: the same shard names, each byte-identical
    local a=$1 b=$2 n=0 f
    for f in "$a"/shard-*.bin; do
        cmp -s "$f" "$b/$(basename "$f")" || return 1
        n=$((n + 1))
    done
    [ "$n" -eq 3 ] && [ "$(ls "$b"/shard-*.bin | wc -l)" -eq 3 ]
}
"$B" datagen "${T[@]}" -t 2 --states-of "$tmp/t" -o "$tmp/c" 2> "$tmp/log" || { bad "--states-of"; cat "$tmp/log"; }
same_shards "$tmp/s" "$tmp/c" && ok "--states-of: the --keep-states shards, byte for byte" || bad "--states-of shards differ from --keep-states"
grep -qx "states kept" "$tmp/c/meta.txt" && grep -q "^states_of $tmp/t\$" "$tmp/c/meta.txt" \
    && ok "meta.txt: states kept, states_of the source" || { bad "meta.txt"; cat "$tmp/c/meta.txt"; }
"$B" datagen "${T[@]}" -t 1 --states-of "$tmp/t" --state-layers 1,3 -o "$tmp/cx" 2> "$tmp/log" || { bad "--states-of --state-layers"; cat "$tmp/log"; }
same_shards "$tmp/sx" "$tmp/cx" && ok "--states-of --state-layers: the --keep-states --state-layers shards" || bad "--state-layers shards differ"

# resume: a removed shard comes back the same, the others are not rewritten
touch -d '2000-01-01' "$tmp/c/shard-00000.bin"; rm "$tmp/c/shard-00001.bin"
"$B" datagen "${T[@]}" -t 1 --states-of "$tmp/t" -o "$tmp/c" 2> "$tmp/log" || { bad "resume"; cat "$tmp/log"; }
same_shards "$tmp/s" "$tmp/c" && [ -z "$(find "$tmp/c/shard-00000.bin" -newer "$tmp/c/meta.txt")" ] \
    && ok "resume: the missing shard written again, the others kept" || bad "resume"

# planted: the states of other answers (another seed) must not compare equal
"$B" datagen "${T[@]}" --sample 24 -n 100 --shard-seqs 8 -t 1 -s 99 -o "$tmp/t2" 2> /dev/null
"$B" datagen "${T[@]}" -t 1 --states-of "$tmp/t2" -o "$tmp/c2" 2> /dev/null
same_shards "$tmp/s" "$tmp/c2" && bad "planted: other answers compared equal" || ok "planted: other answers' shards differ"

# refused: data with states, --prompts, another model's data
expect_error() {  # what, pattern, command...
    local what=$1 pat=$2; shift 2
    if "$@" > "$tmp/out" 2>&1; then bad "$what: accepted"; elif grep -q "$pat" "$tmp/out"; then ok "$what: refused ($(grep -m1 error "$tmp/out" | cut -c1-90))"; else bad "$what: unclear error"; cat "$tmp/out"; fi
}
expect_error "states data" "keeps the target's states already" "$B" datagen "${T[@]}" --states-of "$tmp/s" -o "$tmp/e1"
expect_error "--prompts" "do not apply" "$B" datagen "${T[@]}" --states-of "$tmp/t" --prompts x -o "$tmp/e2"
expect_error "another model" "error" "$B" datagen -m "$BEAGLE_MODEL" --states-of "$tmp/t" -o "$tmp/e3"
expect_error "a layer past the target" "layer" "$B" datagen "${T[@]}" --states-of "$tmp/t" --state-layers 9 -o "$tmp/e4"
[ ! -e "$tmp/e1" ] && [ ! -e "$tmp/e3" ] && [ ! -e "$tmp/e4" ] && ok "nothing written when refused" || bad "a refused run left a directory"

echo "$fails failed"
[ "$fails" -eq 0 ]

#!/usr/bin/env bash
# test_cli_errors.sh: bad command lines and bad inputs to `beagle generate` get a clear message on
# stderr and exit code 1: never a signal, never a hang (each run has a 60 s limit).
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
skips=0
. "$(dirname "$0")/expect_error.sh"
expect_error "no command" "usage" "$B"
expect_error "unknown command" "unknown command 'frobnicate'" "$B" frobnicate
expect_error "unknown flag" "unknown option '--bogus'" "$B" generate -m "$M/stories260K.bin" --bogus
expect_error "missing value" "expects a value" "$B" generate -m
expect_error "bad integer" "expects an integer, got 'ten'" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n ten
expect_error "bad number" "expects a number, got 'hot'" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" --temp hot
expect_error "negative n" "-n must be >= 0" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n -5
expect_error "no model" "-m MODEL is required" "$B" generate -p hi
expect_error "missing model file" "'$tmp/nope.gguf': No such file" "$B" generate -m "$tmp/nope.gguf" -p hi
expect_error "missing tokenizer file" "cannot open '$tmp/nope.bin'" "$B" generate -m "$M/stories260K.bin" -z "$tmp/nope.bin"
expect_error ".bin without tokenizer" "carries no tokenizer" "$B" generate -m "$M/stories260K.bin" -p hi
expect_error "tokenizer does not fit" "does not fit model" "$B" generate -m "$M/stories260K.bin" -z "$M/tokenizer.bin" -p hi
printf 'Once upon a \xff\xfe time' > "$tmp/bad_utf8.txt"
expect_error "invalid UTF-8 prompt" "not valid UTF-8" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -f "$tmp/bad_utf8.txt"
python3 -c "print('Once upon a time there was a dog. ' * 200)" > "$tmp/long.txt"
expect_error "prompt longer than context" "context holds 512" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -f "$tmp/long.txt"
expect_error "bad threads" "-t must be in 1..256" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -t 0
expect_error "prompt file missing" "cannot open" "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -f "$tmp/none.txt"
expect_error "directory as model" "" "$B" generate -m "$tmp" -p hi
S=(generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p hi)
expect_error "net delay without server" "give --server URL" "$B" "${S[@]}" --net-delay 5g
expect_error "bad net delay" "--net-delay expects MS[,SD]" "$B" "${S[@]}" --temp 0 --server http://127.0.0.1:1 --net-delay 10,abc
expect_error "negative net delay" "--net-delay expects MS[,SD]" "$B" "${S[@]}" --temp 0 --server http://127.0.0.1:1 --net-delay -3
expect_error "bad server states" "--server-states must be f32 or q8, got 'f16'" "$B" "${S[@]}" --temp 0 --server http://127.0.0.1:1 --server-states f16
expect_error "server sampling" "--server needs --temp 0" "$B" "${S[@]}" --server http://127.0.0.1:1 --temp 0.7
expect_error "server unreachable" "no answer to start" "$B" "${S[@]}" --server http://127.0.0.1:1 --temp 0
# --help works for every subcommand and exits 0
for c in generate info tokenize bench; do
  if timeout 20 "$B" $c --help > "$tmp/help" 2>&1 && grep -q "usage: beagle $c" "$tmp/help"; then echo "ok   $c --help"; else echo "FAIL $c --help"; fails=$((fails+1)); fi
done
# context fills up mid-generation: stops cleanly with a note, exit 0
if timeout 60 "$B" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 600 --temp 0 -c 64 > "$tmp/out" 2> "$tmp/err" && grep -q "context full" "$tmp/err"; then
  echo "ok   context full stops cleanly"; else echo "FAIL context full"; cat "$tmp/err"; fails=$((fails+1)); fi
# speculative decoding: bad flags and a draft that does not fit the target
D=$BEAGLE_ROOT/weights/beagle-stories260K.bin
S=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
expect_error "tree without a draft" "needs a draft (-d DRAFT or -md MODEL)" "$B" generate "${S[@]}" --spec tree -p hi
expect_error "unknown --spec" "--spec must be none, lookup, chain, tree, hybrid or auto, got 'forest'" "$B" generate "${S[@]}" -d "$D" --spec forest -p hi
expect_error "hybrid without a draft" "--spec hybrid needs a draft" "$B" generate "${S[@]}" --spec hybrid -p hi
# an independent draft model (-md): one draft only, its modes, its vocabulary
expect_error "-d and -md" "give a Beagle draft (-d) or a draft model (-md), not both" "$B" generate "${S[@]}" -d "$D" -md "$M/stories260K.bin" -p hi
expect_error "-md hybrid" "a draft model (-md) drafts in mode chain, tree or auto, got --spec hybrid" "$B" generate "${S[@]}" -md "$M/stories260K.bin" --spec hybrid -p hi
expect_error "-md missing file" "nope.gguf" "$B" generate "${S[@]}" -md "$tmp/nope.gguf" -p hi
expect_error "serve -md lookup" "beagle serve: a draft model (-md) drafts in mode chain, tree or auto" "$B" serve "${S[@]}" -md "$M/stories260K.bin" --spec lookup
expect_error "bench-sd md-chain without -md" "mode md-chain needs a draft model (-md MODEL)" "$B" bench-sd "${S[@]}" --prompts "$tmp/p.jsonl" --modes none,md-chain
if [ -f "$BEAGLE_MODEL" ]; then
  expect_error "-md of another vocabulary" "does not share the target's vocabulary: it has 49152 tokens" "$B" generate "${S[@]}" -md "$BEAGLE_MODEL" -p hi
else
  echo "SKIP: -md vocabulary check: no model at '${BEAGLE_MODEL:-}' (make model)"; skips=$((skips+1))
fi
expect_error "auto with a fixed tree size" "--spec auto chooses from measured costs: it needs --total-tokens auto, got '60'" \
  "$B" generate "${S[@]}" -d "$D" --spec auto --total-tokens 60 -p hi
expect_error "--draft-threads -2" "--draft-threads must be in -1..256, got -2" "$B" generate "${S[@]}" -d "$D" --draft-threads -2 -p hi
expect_error "--depth 0" "--depth must be in 1..32, got 0" "$B" generate "${S[@]}" -d "$D" --depth 0 -p hi
expect_error "--total-tokens 1" "--total-tokens must be 'auto' or an integer in 2..1024" "$B" generate "${S[@]}" -d "$D" --total-tokens 1 -p hi
expect_error "--gamma 0" "--gamma" "$B" generate "${S[@]}" -d "$D" --spec chain --gamma 0 -p hi
# the drafting flags are checked alike by the three subcommands that share them (draft_options.h)
expect_error "bench-sd --topk 65" "beagle bench-sd: --topk must be in 1..64, got 65" "$B" bench-sd "${S[@]}" -d "$D" --prompts "$tmp/p.jsonl" --topk 65
expect_error "bench-sd --draft-context -2" "beagle bench-sd: --draft-context: expected -1, 0 or a number" "$B" bench-sd "${S[@]}" -d "$D" --prompts "$tmp/p.jsonl" --draft-context -2
expect_error "serve --gamma 64" "beagle serve: --gamma must be in 1..63, got 64" "$B" serve "${S[@]}" -d "$D" --gamma 64
expect_error "missing draft file" "nope.bin" "$B" generate "${S[@]}" -d "$tmp/nope.bin" -p hi
head -c 1000 "$D" > "$tmp/trunc.bin"
expect_error "truncated draft" "truncated" "$B" generate "${S[@]}" -d "$tmp/trunc.bin" -p hi
if [ -f "$BEAGLE_MODEL" ]; then
  expect_error "draft for another target" "draft was trained for a target with dim 64, this target has dim 576" \
    "$B" generate -m "$BEAGLE_MODEL" -d "$D" -p hi
else
  echo "SKIP: draft-for-another-target check: no model at '${BEAGLE_MODEL:-}' (make model)"; skips=$((skips+1))
fi
# beagle info on a draft file: its config; a truncated one: a clear error
if timeout 20 "$B" info "$D" > "$tmp/info" 2>&1 && grep -q "format:  Beagle draft" "$tmp/info" && grep -q "ffn_dim           172" "$tmp/info"; then
  echo "ok   info on a draft file"; else echo "FAIL info on a draft file"; cat "$tmp/info"; fails=$((fails+1)); fi
expect_error "info on a truncated draft" "truncated" "$B" info "$tmp/trunc.bin"
# a tree larger than the context left: the tree is cut to fit, the text equals plain greedy decoding
for spec in tree chain lookup auto; do
  tt=500; [ $spec = auto ] && tt=auto  # auto sizes its trees from the measured verify cost
  if timeout 60 "$B" generate "${S[@]}" -d "$D" --spec $spec --gamma 40 --total-tokens $tt --max-tree 600 -c 48 -p "Once upon" --temp 0 -n 100 > "$tmp/sd" 2> "$tmp/err" &&
     timeout 60 "$B" generate "${S[@]}" --spec none -c 48 -p "Once upon" --temp 0 -n 100 > "$tmp/plain" 2>/dev/null &&
     cmp -s "$tmp/sd" "$tmp/plain" && grep -q "context full" "$tmp/err"; then
    echo "ok   --spec $spec, tree > context left: same text as plain, stopped at context full"
  else echo "FAIL --spec $spec with a tree larger than the context left"; cat "$tmp/err"; fails=$((fails+1)); fi
done
# the EAGLE-style draft (arch eagle): generate runs it (same text as plain greedy, a tree larger than the
# context left included); --no-concat is refused; info names its architecture; train --arch checks its value
E=$BEAGLE_ROOT/weights/eagle-stories260K.bin
if [ -f "$E" ]; then
  for spec in tree chain; do
    if timeout 60 "$B" generate "${S[@]}" -d "$E" --spec $spec --total-tokens 500 --max-tree 600 -c 48 -p "Once upon" --temp 0 -n 100 > "$tmp/sd" 2> "$tmp/err" &&
       timeout 60 "$B" generate "${S[@]}" --spec none -c 48 -p "Once upon" --temp 0 -n 100 > "$tmp/plain" 2>/dev/null &&
       cmp -s "$tmp/sd" "$tmp/plain"; then
      echo "ok   eagle draft --spec $spec: same text as plain"
    else echo "FAIL eagle draft --spec $spec"; cat "$tmp/err"; fails=$((fails+1)); fi
  done
  expect_error "eagle --no-concat" "--no-concat is a Beagle draft's mode" "$B" generate "${S[@]}" -d "$E" --no-concat -p hi
  if timeout 20 "$B" info "$E" > "$tmp/info" 2>&1 && grep -q "arch eagle" "$tmp/info" && grep -q "fc_e" "$tmp/info" && ! grep -q norm_kv "$tmp/info"; then
    echo "ok   info on an eagle draft"; else echo "FAIL info on an eagle draft"; cat "$tmp/info"; fails=$((fails+1)); fi
else
  echo "SKIP: eagle draft checks: no $E"; skips=$((skips+1))
fi
expect_error "train --arch hydra" "draft architecture 'hydra' is not one of beagle, eagle, medusa" "$B" train "${S[@]}" --data "$tmp" -o "$tmp/d.bin" --arch hydra
echo "$fails failures, $skips parts skipped"
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77

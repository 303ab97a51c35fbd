#!/usr/bin/env bash
# test_chat_errors.sh: bad command lines and bad inputs to `beagle chat` get a clear message on stderr and
# exit code 1 before any turn (60 s limit each, no stdin); --help exits 0; input that is not a terminal works
# and its end exits 0.
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
D=$BEAGLE_ROOT/weights/beagle-stories260K.bin
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/expect_error.sh"
S=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
expect_error "no model" "beagle chat: -m MODEL is required" "$B" chat
expect_error "missing model file" "'$tmp/nope.gguf': No such file" "$B" chat -m "$tmp/nope.gguf"
expect_error "unknown flag" "beagle chat: unknown option '--bogus' (see 'beagle chat --help')" "$B" chat "${S[@]}" --bogus
expect_error "missing value" "option '-n' expects a value" "$B" chat "${S[@]}" -n
expect_error "bad integer" "option '-c' expects an integer, got 'big'" "$B" chat "${S[@]}" -c big
expect_error "stray argument" "beagle chat: unexpected argument 'hello'" "$B" chat "${S[@]}" hello
expect_error "-n below -1" "beagle chat: -n must be >= -1" "$B" chat "${S[@]}" -n -2
expect_error "negative temperature" "beagle chat: --temp must be >= 0, got -1" "$B" chat "${S[@]}" --temp -1
expect_error "no chat template" "--chat-template" "$B" chat "${S[@]}"
expect_error "unknown template name" "expected one of" "$B" chat "${S[@]}" --chat-template vicuna
expect_error "missing draft file" "nope.bin" "$B" chat "${S[@]}" --chat-template chatml -d "$tmp/nope.bin"
expect_error "-d and -md" "beagle chat: give a Beagle draft (-d) or a draft model (-md), not both" "$B" chat "${S[@]}" -d "$D" -md "$M/stories260K.bin"
expect_error "tree without a draft" "beagle chat: --spec tree needs a draft (-d DRAFT or -md MODEL)" "$B" chat "${S[@]}" --spec tree
if timeout 20 "$B" chat --help > "$tmp/help" 2>&1 && grep -q "usage: beagle chat" "$tmp/help" && grep -q -- "-sys, --system-prompt" "$tmp/help"; then
  echo "ok   chat --help"; else echo "FAIL chat --help"; cat "$tmp/help"; fails=$((fails+1)); fi
# a conversation that outgrows the context: a clear error, exit 1
printf 'Once upon a time\nthere was a dog\n' > "$tmp/in"
timeout 60 "$B" chat "${S[@]}" --chat-template chatml --temp 0 -c 40 -n 30 < "$tmp/in" > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "error: the conversation is .* tokens but the context holds 40" "$tmp/err"; then
  echo "ok   conversation past the context: $(grep error: "$tmp/err")"; else echo "FAIL conversation past the context: exit $rc"; cat "$tmp/err"; fails=$((fails+1)); fi
# input from a pipe: two turns, then the end of input exits 0
printf 'Once upon a time\n\nThe end\n' | timeout 60 "$B" chat "${S[@]}" --chat-template chatml --temp 0 -n 8 > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^> ' "$tmp/out")" -ge 3 ]; then
  echo "ok   piped input: exit 0 at its end"; else echo "FAIL piped input: exit $rc"; cat "$tmp/out" "$tmp/err"; fails=$((fails+1)); fi
echo "$fails failures"
[ $fails -eq 0 ]

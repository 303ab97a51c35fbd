#!/usr/bin/env bash
# test_perplexity_errors.sh: `beagle perplexity` refuses bad input with a clear message and exit 1: a text
# too short for its context (the message gives the tokens needed and found), a missing text or model
# file, a bad -c / -b / --chunks, a -c beyond the model's context, a missing -f; --help exits 0.
set -u
M=$BEAGLE_ROOT/data/models/stories260K.gguf
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/expect_error.sh"
P=("$B" perplexity -m "$M" -t 1)
printf 'Once upon a time, there was a little girl named Lily.\n' > "$tmp/short.txt"
n=$("$B" tokenize -m "$M" -f "$tmp/short.txt" --ids --no-special | wc -w)
expect_error "text too short" "is $n tokens; -c 64 needs at least 128" "${P[@]}" -f "$tmp/short.txt" -c 64
expect_error "empty text" "is 1 tokens; -c 16 needs at least 32" "${P[@]}" -f /dev/null -c 16
expect_error "missing text file" "cannot open '$tmp/none.txt'" "${P[@]}" -f "$tmp/none.txt"
expect_error "missing model file" "No such file" "$B" perplexity -m "$tmp/nope.gguf" -f "$tmp/short.txt"
expect_error "no -f" "-f TEXT is required" "$B" perplexity -m "$M"
expect_error "no -m" "-m MODEL is required" "$B" perplexity -f "$tmp/short.txt"
expect_error "-c too small" "-c must be in 4..65536, got 2" "${P[@]}" -f "$tmp/short.txt" -c 2
expect_error "-c not a number" "expects an integer, got 'big'" "${P[@]}" -f "$tmp/short.txt" -c big
expect_error "-c beyond the model" "-c 4096 exceeds the model's context length 2048" "${P[@]}" -f "$tmp/short.txt" -c 4096
expect_error "bad -b" "-b must be in 1..4096, got 0" "${P[@]}" -f "$tmp/short.txt" -b 0
expect_error "bad --chunks" "--chunks must be -1 (all) or >= 1, got 0" "${P[@]}" -f "$tmp/short.txt" --chunks 0
printf 'Once upon a \xff\xfe time' > "$tmp/bad_utf8.txt"
expect_error "invalid UTF-8 text" "not valid UTF-8" "${P[@]}" -f "$tmp/bad_utf8.txt" -c 4
if "$B" perplexity --help > "$tmp/help" 2>&1 && grep -q "second" "$tmp/help" && grep -q -- "--chunks" "$tmp/help"; then
  echo "ok   --help"
else
  echo "FAIL --help"; cat "$tmp/help"; fails=$((fails+1))
fi
if "$B" --help | grep -q "perplexity"; then echo "ok   listed in beagle --help"; else echo "FAIL not in beagle --help"; fails=$((fails+1)); fi
[ $fails -eq 0 ] && echo "test_perplexity_errors: OK" || echo "test_perplexity_errors: $fails failures"
[ $fails -eq 0 ]

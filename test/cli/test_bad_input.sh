#!/usr/bin/env bash
# test_bad_input.sh: `beagle info` on bad arguments and bad paths: each must exit 1 with one
# "error: ..." line on stderr naming the problem, without a signal or a hang (timeout 20 s); and
# --help exits 0. (Corrupt file contents are covered by test_bad_input.cpp.)
set -u
BIN=${BEAGLE_BIN:-build/beagle}
DATA=$PWD/data
STORIES=$DATA/models/stories260K.gguf
TMP=$(mktemp -d "${TMPDIR:-/tmp}/beagle_badinput_XXXXXX")
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

# expect_error NEEDLE ARGS...: exit code 1, stderr is one line "error: ...NEEDLE..."
expect_error() {
  local needle=$1
  shift
  timeout -s KILL 20 "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  local rc=$?
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^error: ' "$TMP/err" && grep -qF -- "$needle" "$TMP/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: beagle $* -> exit $rc, stderr: $(cat "$TMP/err") (want '$needle')"
  fi
}

expect_error "no model given" info
expect_error "option '-m' expects a value" info -m
expect_error "unknown option '--bogus'" info --bogus
expect_error "cannot open model '/nonexistent/x.gguf'" info -m /nonexistent/x.gguf
expect_error "has no config.json" info -m "$TMP"
expect_error "unexpected argument 'extra'" info -m "$STORIES" extra
expect_error "--dump-tensor needs --out FILE" info -m "$STORIES" --dump-tensor token_embd.weight
expect_error "--out is only used with --dump-tensor" info -m "$STORIES" --out "$TMP/x"
expect_error "no tensor named 'nope'" info -m "$STORIES" --dump-tensor nope --out "$TMP/x"
expect_error "cannot create '$TMP/no/such/dir/x'" info -m "$STORIES" --dump-tensor token_embd.weight --out "$TMP/no/such/dir/x"
: >"$TMP/empty.bin"
expect_error "is empty (0 bytes)" info -m "$TMP/empty.bin"
mkfifo "$TMP/fifo.gguf" && expect_error "is not a regular file or directory" info -m "$TMP/fifo.gguf"
expect_error "draft path '$TMP/fifo.gguf' is not a regular file" generate -m "$STORIES" --draft "$TMP/fifo.gguf" -p x -n 2
mkdir -p "$TMP/hf" && echo '{"hidden_size": 64,, }' >"$TMP/hf/config.json" && : >"$TMP/hf/model.safetensors"
expect_error "config.json: invalid JSON at line 1, column 20" info -m "$TMP/hf"
expect_error "cannot open" info -m "$STORIES" -z /nonexistent/tokenizer.json

# help and a good file exit 0
timeout 20 "$BIN" info --help >"$TMP/out" 2>&1 && grep -q -- "--dump-tensor" "$TMP/out" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: info --help"; }
timeout 20 "$BIN" info -m "$STORIES" >"$TMP/out" 2>&1 && grep -q "^format:  gguf" "$TMP/out" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: info on stories260K.gguf"; }
# --dump-tensor writes rows x cols f32
timeout 20 "$BIN" info -m "$STORIES" --dump-tensor output_norm.weight,token_embd.weight --out "$TMP/d.f32" &&
  [ "$(stat -c %s "$TMP/d.f32")" -eq $(((64 + 512 * 64) * 4)) ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: --dump-tensor size"; }

echo "test_bad_input.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]

# expect_error.sh: sourced by the CLI tests that check a command's error (test_cli_errors.sh,
# test_no_http_build.sh). expect_error DESCRIPTION NEEDLE COMMAND...: the command (60 s limit, no stdin)
# must exit 1 with NEEDLE in its stderr; else a FAIL line and fails + 1. Needs $tmp (a scratch directory)
# and $fails (the caller's failure count).
expect_error() {
  local what=$1 needle=$2; shift 2
  timeout 60 "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
  local rc=$?
  if [ $rc -ne 1 ]; then echo "FAIL $what: exit $rc (want 1)"; head -5 "$tmp/err"; fails=$((fails+1)); return; fi
  if ! grep -qF -- "$needle" "$tmp/err"; then echo "FAIL $what: stderr lacks '$needle':"; cat "$tmp/err"; fails=$((fails+1)); return; fi
  echo "ok   $what: $(head -c 200 "$tmp/err" | tr '\n' ' ')"
}

#!/usr/bin/env bash
# test_no_http_build.sh: the NO_HTTP=1 build (a machine without cpp-httplib and no network to install it,
# e.g. an offline GPU machine running scripts/gpu_check.sh) links without libcpp-httplib and zlib, generates the
# same text as the normal build, and `serve` / `generate --server` exit 1 with a message that says why.
# Only src/serve/server.cpp and remote.cpp differ under NO_HTTP, so this compiles those two with
# -DBEAGLE_NO_HTTP and links them ahead of the normal objects and library (their symbols win).
set -u
B=$(dirname "$BEAGLE_BIN")
MODEL=$BEAGLE_ROOT/weights/SmolLM2-135M-Instruct.Q4_1.gguf
M=$BEAGLE_ROOT/data/models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$BEAGLE_ROOT"
FLAGS=(-std=c++17 -O1 -pthread -mavx2 -mfma -mf16c -DBEAGLE_NO_HTTP -Isrc)
for f in server remote; do
  g++ "${FLAGS[@]}" -c src/serve/$f.cpp -o "$tmp/$f.o" || { echo "FAIL: src/serve/$f.cpp does not compile with NO_HTTP"; exit 1; }
done
cli=$(ls "$B"/obj/src/cli/*.o)
g++ -pthread -o "$tmp/beagle" "$tmp/server.o" "$tmp/remote.o" $cli "$B/libbeagle.a" -pthread -ldl \
  || { echo "FAIL: the NO_HTTP build does not link without -lcpp-httplib -lz"; exit 1; }
if ldd "$tmp/beagle" | grep -E 'httplib|libz\.'; then echo "FAIL: the NO_HTTP binary still links the libraries above"; fails=$((fails+1)); fi
# same text as the normal build (stories260K, greedy)
want=$("$BEAGLE_BIN" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "Once upon a time" -n 40 --temp 0 2>/dev/null)
got=$("$tmp/beagle" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "Once upon a time" -n 40 --temp 0 2>/dev/null)
if [ -n "$want" ] && [ "$want" = "$got" ]; then echo "ok   generate: the same 40 tokens as the normal build"
else echo "FAIL generate: normal build '$want', NO_HTTP build '$got'"; fails=$((fails+1)); fi
. "$HERE/expect_error.sh"
expect_error "serve" "built with NO_HTTP=1 (without cpp-httplib): \`serve\` is not available" \
  "$tmp/beagle" serve -m "$M/stories260K.bin" -z "$M/tok512.bin" --port 0
expect_error "generate --server" "built with NO_HTTP=1 (without cpp-httplib): remote drafting (--server) is not available" \
  "$tmp/beagle" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" --server http://127.0.0.1:1 --spec none --temp 0 -p hi -n 4
[ $fails -eq 0 ] && echo "NO_HTTP build: links without cpp-httplib, same text, clear errors" || echo "FAIL"
[ $fails -eq 0 ]

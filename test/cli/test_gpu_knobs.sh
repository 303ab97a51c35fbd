#!/usr/bin/env bash
# test_gpu_knobs.sh: scripts/gpu_knobs.sh's choice of settings (it sets the CUDA defaults from a device run)
# on a stand-in for beagle-cuda whose `bench` JSON depends on the knobs in its environment, so the right
# answer is known: 32-key slices decode 50 % faster (chosen), 8-row dp4a blocks 1 % faster (noise: not
# chosen), dp4a to T = 32 verifies T = 5..32 faster (chosen, by verify, not decode). Then: a stand-in where no knob matters chooses nothing, and one that always fails makes the
# script exit non-zero.
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
# the stand-in: bench -m MODEL ... -o FILE writes one JSON object like beagle bench's
cat > "$tmp/fake" <<'EOF'
#!/usr/bin/env bash
out=; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
[ -n "${FAKE_FAIL:-}" ] && { echo "fake: failing" >&2; exit 1; }
python3 - "$out" <<'PY'
import json, os, sys
e = os.environ.get
flat = e("FAKE_FLAT")
dec = 100.0
if not flat and e("BEAGLE_CUDA_ATTN_SPLIT") == "64": dec = 150.0
if not flat and e("BEAGLE_CUDA_QGEMM_ROWS") == "8": dec = 101.0
vc = []
for T in list(range(1, 17)) + [24, 32, 48, 64]:
    ms = 1.0 + 0.1 * T
    if not flat and e("BEAGLE_CUDA_DP4A_MAX_T") == "32" and 5 <= T <= 32: ms *= 0.7
    vc.append({"T": T, "ms": ms, "cost": ms / 1.1})
json.dump({"decode_tok_s": dec, "prefill_tok_s": 1000.0, "verify_cost": vc}, open(sys.argv[1], "w"))
PY
EOF
chmod +x "$tmp/fake"
touch "$tmp/model.gguf"
if BEAGLE_CUDA_BIN=$tmp/fake bash scripts/gpu_knobs.sh "$tmp/model.gguf" "$tmp/k.json" > "$tmp/out.txt" 2>&1; then
  env=$(sort "$tmp/k.env" | tr '\n' ' ')
  [ "$env" = "export BEAGLE_CUDA_ATTN_SPLIT=64 export BEAGLE_CUDA_DP4A_MAX_T=32 " ] ||
    bad "chosen: '$env', expected ATTN_SPLIT=64 and DP4A_MAX_T=32 only"
  n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["settings"]))' "$tmp/k.json")
  [ "$n" -ge 10 ] || bad "only $n settings in the JSON"
else
  bad "gpu_knobs.sh exited non-zero: $(tail -3 "$tmp/out.txt")"
fi
FAKE_FLAT=1 BEAGLE_CUDA_BIN=$tmp/fake bash scripts/gpu_knobs.sh "$tmp/model.gguf" "$tmp/f.json" > "$tmp/out2.txt" 2>&1 ||
  bad "flat stand-in: gpu_knobs.sh exited non-zero"
[ -f "$tmp/f.env" ] && [ ! -s "$tmp/f.env" ] || bad "flat stand-in: chose '$(cat "$tmp/f.env" 2>/dev/null)', expected nothing"
if FAKE_FAIL=1 BEAGLE_CUDA_BIN=$tmp/fake bash scripts/gpu_knobs.sh "$tmp/model.gguf" "$tmp/x.json" > "$tmp/out3.txt" 2>&1; then
  bad "every setting failing: gpu_knobs.sh exited 0"
fi
[ $fails -eq 0 ] && echo "ok   gpu_knobs.sh chooses the settings that beat both defaults by > 2 % where the knob acts, nothing on noise, fails when nothing ran"
exit $((fails > 0))

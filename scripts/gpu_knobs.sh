#!/usr/bin/env bash
# gpu_knobs.sh: times the CUDA backend's launch choices on a GPU, each set by an environment variable:
# `beagle-cuda bench` (decode tok/s, the verify cost T = 1..64) once per setting, side by side in one run,
# then prints the fastest setting of each knob and writes every measurement to JSON.
#   BEAGLE_CUDA_ATTN_SPLIT      keys per split-KV slice (cuda/attention.cu; default 32). Another length is
#                               another reduction order: other bits, the same in every kernel and batch size
#   BEAGLE_CUDA_ATTN_SPLIT_MAX_T split-KV for passes up to T queries (default 64; above: the query-tiled kernel) }
#   BEAGLE_CUDA_QGEMM_ROWS      weight rows per block of the dp4a GEMM (default: by grid size)   } the same
#   BEAGLE_CUDA_DP4A_MAX_T      the dp4a GEMM up to T tokens (default 16; above: tensor cores)    } bits (tests memcmp)
#   BEAGLE_CUDA_QGEMM_TOKENS    tokens per dp4a block above 4 (default 16: weights read once; 4)  }
# The defaults are the settings this script found fastest on H100 and H200 GPUs (docs/gpu.md), but for
# BEAGLE_CUDA_QGEMM_TOKENS and the rule's 4-row blocks, not yet timed (the byte model's choices: weights read
# once; SmolLM2's decode GEMMs one full wave).
# Usage: scripts/gpu_knobs.sh MODEL OUT.json [--prompt-tokens N] [-z TOKENIZER]   (BEAGLE_CUDA_BIN: default build/beagle-cuda)
# The knobs a build does not read are timed anyway and come out equal to the default (noise): the JSON
# says which build ran. Writes OUT.json and OUT.env (`export` lines: each knob's best setting where it beats
# both default runs by more than 2 %: slice length and rows by decode tok/s, the dp4a range by verify T = 5..32).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 2; }
MODEL=$1; OUT=$2; shift 2
NP=256
TOK=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt-tokens) NP=$2; shift ;;
    -z) TOK=(-z "$2"); shift ;;
    *) echo "gpu_knobs.sh: unknown argument '$1' (expected --prompt-tokens N, -z TOKENIZER)" >&2; exit 2 ;;
  esac
  shift
done
BIN=${BEAGLE_CUDA_BIN:-build/beagle-cuda}
[ -f "$MODEL" ] || { echo "gpu_knobs.sh: missing model $MODEL" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# name|environment: the default first; each other line changes one knob
SETTINGS=(
  "default|"
  "attn_split=64|BEAGLE_CUDA_ATTN_SPLIT=64"
  "attn_split=128|BEAGLE_CUDA_ATTN_SPLIT=128"
  "attn_split=256|BEAGLE_CUDA_ATTN_SPLIT=256"
  "attn_split_max_t=16|BEAGLE_CUDA_ATTN_SPLIT_MAX_T=16"
  "qgemm_rows=4|BEAGLE_CUDA_QGEMM_ROWS=4"
  "qgemm_rows=8|BEAGLE_CUDA_QGEMM_ROWS=8"
  "qgemm_rows=16|BEAGLE_CUDA_QGEMM_ROWS=16"
  "qgemm_rows=32|BEAGLE_CUDA_QGEMM_ROWS=32"
  "dp4a_max_t=4|BEAGLE_CUDA_DP4A_MAX_T=4"
  "dp4a_max_t=8|BEAGLE_CUDA_DP4A_MAX_T=8"
  "dp4a_max_t=32|BEAGLE_CUDA_DP4A_MAX_T=32"
  "qgemm_tokens=4|BEAGLE_CUDA_QGEMM_TOKENS=4"
  "default_again|"
)
i=0
for s in "${SETTINGS[@]}"; do
  name=${s%%|*}; envs=${s#*|}
  # shellcheck disable=SC2086
  if env $envs "$BIN" bench -m "$MODEL" "${TOK[@]}" --backend cuda --prompt-tokens "$NP" --reps 3 -o "$tmp/$i.json" > /dev/null 2> "$tmp/$i.log"; then
    echo "$name|$envs|$tmp/$i.json"
  else
    echo "gpu_knobs.sh: $name failed: $(tail -3 "$tmp/$i.log")" >&2
  fi
  i=$((i + 1))
done > "$tmp/list"
python3 - "$tmp/list" "$OUT" "$MODEL" "$BIN" "$NP" <<'EOF'
import json, sys
lst, out, model, binary, np_ = sys.argv[1:]
rows = []
if not open(lst).read().strip(): sys.exit("gpu_knobs.sh: no setting ran")
for line in open(lst):
    name, envs, path = line.rstrip("\n").split("|")
    b = json.load(open(path))
    vc = {v["T"]: v["ms"] for v in b["verify_cost"]}
    rows.append({"name": name, "env": envs, "decode_tok_s": b["decode_tok_s"], "prefill_tok_s": b["prefill_tok_s"],
                 "verify_ms": vc})
base = [r for r in rows if r["name"].startswith("default")]
print("%-20s %10s %10s  verify ms T = 1 / 4 / 5 / 8 / 16 / 24 / 64" % ("setting", "decode", "prefill"))
for r in rows:
    v = r["verify_ms"]
    print("%-20s %10.1f %10.1f  %s" % (r["name"], r["decode_tok_s"], r["prefill_tok_s"],
          " / ".join("%.3f" % v.get(T, float("nan")) for T in (1, 4, 5, 8, 16, 24, 64))))
# each knob judged where it acts, against the better of the two default runs, kept when > 2 % better:
# the slice length and the dp4a rows by decode tok/s, the dp4a range by the verify ms summed over T = 5..16, 24, 32,
# the dp4a tokens per block over T = 5..16, the split-KV range by the verify ms summed over T = 24..64
def score(r, knob):
    v = r["verify_ms"]
    if knob in ("attn_split", "qgemm_rows"): return r["decode_tok_s"]
    Ts = list(range(5, 17)) + [24, 32] if knob == "dp4a_max_t" else range(5, 17) if knob == "qgemm_tokens" else (24, 32, 48, 64)
    return -sum(v.get(T, 1e9) for T in Ts)
env, best = [], {}
for r in rows:
    if "=" not in r["name"]: continue
    knob = r["name"].split("=")[0]
    if knob not in best or score(r, knob) > score(best[knob], knob): best[knob] = r
for knob, r in sorted(best.items()):
    ref = max(score(b, knob) for b in base)
    if score(r, knob) > ref + 0.02 * abs(ref): env.append(r["env"])
json.dump({"model": model, "binary": binary, "prompt_tokens": int(np_), "settings": rows,
           "best_decode_env": env}, open(out, "w"), indent=1)
open(out.rsplit(".", 1)[0] + ".env", "w").write("".join("export %s\n" % e for e in env))
print("settings > 2 % better than both default runs:", " ".join(env) or "none")
EOF

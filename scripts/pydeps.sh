#!/usr/bin/env bash
# pydeps.sh: installs the Python packages the test oracles use (never the product path):
# numpy, gguf (its dequantiser is the independent reference), safetensors (HF's reader and writer of
# model.safetensors), tokenizers (HF), sentencepiece, openai
# (the official client, run unmodified against `beagle serve`), jinja2 (renders the models' own chat
# templates, the reference of the chat template families).
set -e
missing=$(python3 - <<'PY'
import importlib.util
mods = {"numpy": "numpy", "gguf": "gguf", "safetensors": "safetensors", "tokenizers": "tokenizers", "sentencepiece": "sentencepiece", "openai": "openai", "jinja2": "Jinja2"}
print(" ".join(p for m, p in mods.items() if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "pydeps: installing $missing"
  python3 -m pip install --quiet --disable-pip-version-check $missing
fi

#!/usr/bin/env bash
# The 738M-parameter random Llama (hidden 2048, 16 layers, 16 heads, vocab 8192) and its tokenizer, made offline in
# ~10 s with scripts/vllm_cpu/make_tiny.py scaled up: the model of search_spaces/transformers-h200.yaml.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.gpu/llama-738m}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude 2>/dev/null || true
if [ ! -f "$OUT/config.json" ]; then
    TINY_HIDDEN=2048 TINY_LAYERS=16 TINY_HEADS=16 HF_HUB_OFFLINE=1 python3 scripts/vllm_cpu/make_tiny.py "$OUT"
fi

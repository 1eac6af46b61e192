#!/usr/bin/env bash
# A real study on one GPU: transformers serve on the lent H200 (or any machine with a GPU, python3 with torch and
# transformers 5.x). From a fresh machine: installs the carried wheels (scripts/gpu/fetch-wheels.sh made them, here),
# makes the model, checks the set-up (autotune doctor), runs `autotune study run transformers-h200`, then `study show`
# and `study report`, and writes the study database, the report and a summary under $OUT.
#
#     scripts/gpu/fetch-wheels.sh                      # once, where pip reaches PyPI
#     OUT=/tmp/out benchmarks/gpu_study.sh [study|checks|all]
#
# `study` runs the study (about 8 minutes on an H200); `checks` runs benchmarks/gpu_checks.py (an induced CUDA
# out-of-memory, autotune bench against a second client) and the GPU tests; `all` does both.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-study}
WHAT=${1:-all}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
fi
scripts/gpu/make_model.sh
export AUTOTUNE_STUDIES_DIR=${AUTOTUNE_STUDIES_DIR:-/tmp/studies}
EXECUTABLE=()
command -v transformers >/dev/null || EXECUTABLE=(--executable "python3 -m transformers.cli.transformers")
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv | tee "$OUT/gpus.txt"

if [ "$WHAT" = study ] || [ "$WHAT" = all ]; then
    python3 -m autotune doctor transformers-h200 | tee "$OUT/doctor.txt" || true
    python3 -m autotune study run transformers-h200 --seed "${SEED:-1}" "${EXECUTABLE[@]}" 2>&1 | tee "$OUT/study.txt"
    COLUMNS=250 python3 -m autotune study show --study transformers-h200 > "$OUT/show.txt"
    python3 -m autotune study show --study transformers-h200 --json > "$OUT/show.json"
    python3 -m autotune study report --study transformers-h200 --out "$OUT/report.html"
    cp "$AUTOTUNE_STUDIES_DIR/transformers-h200.db" "$OUT/"
fi
if [ "$WHAT" = checks ] || [ "$WHAT" = all ]; then
    python3 benchmarks/gpu_checks.py 2>&1 | tee "$OUT/checks.txt"
    python3 -m pytest -q -p no:cacheprovider tests/gpu tests/test_server.py 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
fi

#!/usr/bin/env bash
# Download the wheels of scripts/gpu/wheels.txt into .whl/ (git-ignored) for the lent H200 (CPython 3.12, x86-64):
# what benchmarks/gpu_study.sh installs there with `pip install --no-index --target`.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
mkdir -p .whl
grep -v '^#' scripts/gpu/wheels.txt | grep . | while read -r wheel; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$wheel"
done
ls .whl | wc -l
du -sh .whl

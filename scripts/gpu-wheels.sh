#!/usr/bin/env bash
# The wheels the GPU check (scripts/gpu-check.sh) installs on a GPU machine that has torch but no
# IPython or Jupyter and reaches no package index: those pinned in tests/gpu/wheels.txt, for
# CPython 3.12 on manylinux x86-64, downloaded here (PyPI) into DEST (default .whl, ignored by
# git), then checked: one version of each, every requirement met by a wheel or by the machine's
# image (tests/gpu/wheelset.py). About 14 MiB; carry DEST with the working tree.
#
#   bash scripts/gpu-wheels.sh [DEST]
#
# GPU_WHEELS_PYTHON_VERSION=3.11 fetches the same set for another CPython (to rehearse here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DEST="${1:-.whl}"
PY_VERSION="${GPU_WHEELS_PYTHON_VERSION:-3.12}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$DEST"
# Only this list's wheels: one of another version left from an earlier list would make the
# install there fail (two versions of one package).
find "$DEST" -maxdepth 1 -name '*.whl' -delete
echo "== downloading the wheels of tests/gpu/wheels.txt for CPython $PY_VERSION (manylinux x86_64) into $DEST"
set +e
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  -d "$DEST" -r tests/gpu/wheels.txt 2>&1 | grep -v "is ignored: it is neither"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "!! pip download exited $rc (see above)" >&2; exit 1; }
"$PYTHON" tests/gpu/wheelset.py "$DEST" --python-version "$PY_VERSION"

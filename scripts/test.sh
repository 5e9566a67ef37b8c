#!/usr/bin/env bash
# Install jupyter_disttrain with its test tools and run every check and test:
# ruff, mypy, the browser tests (Debian's Chromium), then pytest (real torchrun, kernels, servers).
source "$(dirname "$0")/env.sh"
# A stale build would be reused by the build hook: always build the lab extension afresh.
rm -rf jupyter_disttrain/labextension
pip_install "$TORCH_SPEC" ".[test]"

echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== pytest"
# Run from the checkout; the installed copy serves kernels and the server alike.
python -m pytest -q -p no:cacheprovider tests --ignore=tests/ui "$@"

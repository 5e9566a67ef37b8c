#!/usr/bin/env bash
# Install jupyter_disttrain with its test tools and run every check and test:
# ruff and mypy; prettier, ESLint, tsc and Jest for the lab extension; the browser tests (Galata in
# Debian's Chromium, installed if missing); then pytest (real torchrun, kernels, servers).
source "$(dirname "$0")/env.sh"
# A stale build would be reused by the build hook: always build the lab extension afresh.
rm -rf jupyter_disttrain/labextension lib tsconfig.tsbuildinfo
pip_install "$TORCH_SPEC" ".[test]"

# One command per line: under `set -e` a failure inside an && list would not stop the run.
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
echo "== lab extension: prettier, eslint, tsc, jest"
jlpm install >/dev/null
jlpm lint:check
jlpm test --silent
echo "== browser tests"
bash tests/ui/run.sh
echo "== pytest"
# Last, so its summary closes the run. It imports this checkout; kernels and servers use the
# installed copy of the same code.
python -m pytest -q -p no:cacheprovider tests --ignore=tests/ui "$@"

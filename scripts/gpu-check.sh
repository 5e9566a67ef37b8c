#!/usr/bin/env bash
# The prepared GPU check (docs/gpu-check.md): the product's GPU paths through its real front doors
# (a kernel running %%distrun cells, the job layer), each check PASS, FAIL or SKIP with its figures,
# in a JSON report and a log: gpu-check.json and gpu-check.log in --out DIR (default: $OUT when set,
# else build/gpu-check).
#
#   bash scripts/gpu-check.sh [--cpu] [--out DIR] [--wheels DIR] [--only NAME,...] [--budget S] [--keep]
#
# Where IPython, ipykernel or jupyter_client is missing (the GPU machine) it first installs the
# wheels that scripts/gpu-wheels.sh fetched (--wheels, default .whl) into a private directory with
# pip --no-index: nothing comes from the network. Where they are there (the test venv) it installs
# nothing. --cpu runs every check on CPU processes with the GPU items skipped and named (the test
# command's mode). The product runs from this working tree (PYTHONPATH), installed or not.
# Exit status: 0 nothing failed, 1 a check failed, 2 the run could not start or outlived its budget.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
WHEELS=""
ARGS=()
SITE=""
trap '[ -z "$SITE" ] || rm -rf "$SITE"' EXIT
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) ARGS+=("$1") ;;
    --wheels) WHEELS="$(realpath -m "$2")"; shift ;;
    --out) ARGS+=("$1" "$(realpath -m "$2")"); shift ;;
    --only|--budget) ARGS+=("$1" "$2"); shift ;;
    --keep) ARGS+=("$1") ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHEELS="${WHEELS:-$PWD/.whl}"

if ! "$PYTHON" -c "import IPython, ipykernel, jupyter_client" 2>/dev/null; then
  shopt -s nullglob
  wheels=("$WHEELS"/*.whl)
  if [ ${#wheels[@]} -eq 0 ]; then
    echo "!! IPython, ipykernel or jupyter_client is missing and $WHEELS holds no wheels:" \
      "run 'bash scripts/gpu-wheels.sh' on a machine with PyPI and carry $WHEELS here" >&2
    exit 2
  fi
  SITE="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")"
  echo "== installing ${#wheels[@]} wheels from $WHEELS into $SITE (no index, no network)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$SITE" "${wheels[@]}"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  # A wheel that does not fit this machine's own packages fails here, loudly, before any check.
  "$PYTHON" -c "import IPython, ipykernel, jupyter_client, zmq, tornado" ||
    { echo "!! the wheels from $WHEELS installed but do not import (see above)" >&2; exit 2; }
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
"$PYTHON" -m tests.gpu.runner "${ARGS[@]}"

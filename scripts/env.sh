# Sourced by the set-up scripts: use the active virtualenv, else make and use ./.venv.
# torch is pinned: 2.13.0 is the CPU build this project is developed and tested with; any
# other spec can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
TORCH_SPEC="torch==2.13.0"
pip_install() { python -m pip install --disable-pip-version-check -q "$@" 2>&1 | grep -v "is ignored: it is neither" || true; }

#!/usr/bin/env bash
# Install jupyter_disttrain and run the quickstart notebook headless on the local backend.
source "$(dirname "$0")/env.sh"
step "installing jupyter_disttrain, torch (CPU) and JupyterLab into $VIRTUAL_ENV (first run: ~8 min, mostly downloads and the lab extension's build; then ~30 s)"
pip_install "$TORCH_SPEC" ".[tensorboard]" ipykernel nbclient
python scripts/run_quickstart.py "$@"

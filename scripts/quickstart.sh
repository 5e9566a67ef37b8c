#!/usr/bin/env bash
# Install jupyter_disttrain and run the quickstart notebook headless on the local backend.
source "$(dirname "$0")/env.sh"
pip_install "$TORCH_SPEC" ".[tensorboard]" ipykernel nbclient
python scripts/run_quickstart.py "$@"

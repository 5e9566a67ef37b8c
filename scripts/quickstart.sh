#!/usr/bin/env bash
# Install jupyter_disttrain with JupyterLab and run the quickstart notebook headless on the local
# backend. A run after one that installed the same sources skips the install (seconds, not minutes).
source "$(dirname "$0")/env.sh"
STAMP="$VIRTUAL_ENV/.jupyter_disttrain-installed"
# The same fingerprint as the last install's means there is nothing to do.
sources="$(install_fingerprint)"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$sources" ] && command -v jupyter-lab >/dev/null \
  && python -c "import jupyter_disttrain" 2>/dev/null; then
  step "jupyter_disttrain, torch and JupyterLab are installed and this checkout has not changed since: no install (remove $STAMP to force one)"
else
  step "installing torch (CPU), JupyterLab (the lab extension's build needs it) and the build tools into $VIRTUAL_ENV (first run: a few minutes, mostly downloads)"
  # The build tools here, not in an isolated build env that pip would make afresh on every run.
  # shellcheck disable=SC2046 # one word a requirement
  pip_install "$TORCH_SPEC" ipykernel nbclient $(build_requirements)
  build_labextension
  step "installing jupyter_disttrain from this checkout, with its lab extension as built"
  pip_install --no-build-isolation "$TORCH_SPEC" "$QUICKSTART_EXTRAS"
  install_fingerprint >"$STAMP" # after the build, which is part of what is installed
fi
python scripts/run_quickstart.py "$@"

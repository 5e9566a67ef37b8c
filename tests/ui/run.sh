#!/usr/bin/env bash
# Browser tests of the JupyterLab UI (Galata/Playwright in Debian's Chromium).
# Installs what is missing (chromium via apt-get; Galata and Playwright, which are dev packages of
# the root package.json, so one `jlpm install` serves the extension's build and these tests; the
# built lab extension), then starts a real JupyterLab and runs tests/*.spec.ts.
# Screenshots go to build/ui-screenshots (SCREENSHOT_DIR); scripts/screenshots.sh refreshes the
# README's docs/screenshots. Nothing in the checkout changes.
# Usage: tests/ui/run.sh [playwright args...]   (e.g. -g "cancel")
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

if ! command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null 2>&1; then
  echo "== installing chromium (apt-get)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
if [ ! -d "$ROOT/node_modules/@jupyterlab/galata" ]; then
  echo "== jlpm install (the lab extension's and the browser tests' node packages; first run ~2 min)"
  (cd "$ROOT" && jlpm install)
fi

# Use the installed package if there is one, else this checkout (server, kernels and page).
# DISTTRAIN_UI_FROM_CHECKOUT=1 tests this checkout even where another one is installed (a git
# worktree beside an editable install); run `jlpm build` in it first.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/disttrain-ui.XXXXXX")"
# A Slurm job in the sidebar (slurm.spec.ts) needs a cluster: as root, Debian's Slurm (installed
# with apt-get if missing) and a private two-node cluster of this run's own (tests/slurm/cluster.py),
# stopped at exit; its clients, the server's kernels among them, find it through SLURM_CONF.
# Without root that spec is skipped.
SLURM_RUN=""
if [ "$(id -u)" -eq 0 ]; then
  bash "$ROOT/tests/slurm/install.sh"
  SLURM_RUN="$(cd "$ROOT" && python -m tests.slurm.cluster start)"
  export SLURM_CONF="$SLURM_RUN/slurm.conf"
fi
# Jobs outlive the kernels that started them (detached, by design): once their job root is gone,
# stop what the tests left running (a job cancelled by no test, a test that failed half-way).
trap 'if [ -n "$SLURM_RUN" ]; then (cd "$ROOT" && python -m tests.slurm.cluster stop "$SLURM_RUN"); rm -rf "$SLURM_RUN"; fi
rm -rf "$WORK"; python -m jupyter_disttrain.cli cancel --orphans' EXIT
if [ -n "${DISTTRAIN_UI_FROM_CHECKOUT:-}" ] || ! jupyter labextension list 2>&1 | grep -q "jupyter_disttrain"; then
  if [ ! -f "$ROOT/jupyter_disttrain/labextension/package.json" ]; then
    echo "== building the lab extension (first run only, ~1 min)"
    (cd "$ROOT" && jlpm build)
  fi
  mkdir -p "$WORK/labextensions"
  ln -s "$ROOT/jupyter_disttrain/labextension" "$WORK/labextensions/jupyter_disttrain"
  export DISTTRAIN_LABEXTENSIONS="$WORK/labextensions"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

export DISTTRAIN_JOB_ROOT="$WORK/jobs"
# The per-user index of job roots (and lab state) of this run only, not the real one.
export JUPYTER_DATA_DIR="$WORK/data"
export DISTTRAIN_BACKEND="${DISTTRAIN_BACKEND:-local}"
export SCREENSHOT_DIR="${SCREENSHOT_DIR:-$ROOT/build/ui-screenshots}"
export JLAB_PORT="${JLAB_PORT:-$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export JLAB_TOKEN="${JLAB_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(24))')}"
mkdir -p "$DISTTRAIN_JOB_ROOT" "$SCREENSHOT_DIR"
cd "$HERE"
"$ROOT/node_modules/.bin/playwright" test "$@"

# Sourced by the set-up scripts: use the active virtualenv, else make and use ./.venv.
# torch is pinned: 2.13.0 is the CPU build this project is developed and tested with; any
# other spec can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Galata drives Debian's Chromium: npm installs never download Playwright's own browsers.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

# step "what happens now": one line before each long step, so a silent minute is never a mystery.
step() {
  CURRENT_STEP="$*"
  echo "== $*"
}

if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    step "creating the virtualenv .venv"
    python3 -m venv .venv
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
TORCH_SPEC="torch==2.13.0"

# pip_install ARGS...: pip with its own progress bars on stdout (the first torch/JupyterLab
# download is long). Installing from this checkout builds the lab extension in the build hook
# (jlpm install + build: needs Node; first run only). A failed install stops the script loudly,
# naming the step and repeating pip's error lines; one harmless warning is dropped from stderr.
pip_install() {
  local log rc
  log="$(mktemp "${TMPDIR:-/tmp}/pip-install.XXXXXX")"
  # stdout stays the terminal (progress bars); stderr goes through the filter and into the log.
  # PIPESTATUS[0] is pip's exit status (grep's is 1 whenever it had nothing to print).
  set +e
  { python -m pip install --disable-pip-version-check "$@" 2>&1 1>&3 3>&- \
    | tee "$log" | grep -v "is ignored: it is neither" >&2
    rc=${PIPESTATUS[0]}; } 3>&1
  set -e
  if [ "$rc" -ne 0 ]; then
    {
      echo
      echo "!! FAILED: ${CURRENT_STEP:-pip install}: \`pip install $*\` exited $rc. pip's errors:"
      grep -E -A4 "^ERROR|error:" "$log" | head -n 40 || tail -n 20 "$log"
    } >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

# jlpm_install: the node packages of the lab extension and the browser tests (one install serves
# both). Usually a no-op by now: the build hook ran it. Quiet unless it fails.
jlpm_install() {
  local out
  if ! out="$(jlpm install 2>&1)"; then
    printf '%s\n' "$out" | grep -v "YN0000\|YN0002\|YN0060\|YN0086" >&2
    echo "!! FAILED: jlpm install (see the lines above)" >&2
    return 1
  fi
}

# fingerprint TEXT PATH...: one hash of TEXT and of the files under PATH... (names and contents;
# dependencies, caches and Python's bytecode left out): whether a build or an install is current.
fingerprint() {
  local text="$1"
  shift
  {
    echo "$text"
    # A path that is not there is not an error: it adds nothing (and so changes the hash).
    find "$@" -type f -not -path "*/node_modules/*" -not -path "*/__pycache__/*" \
      -not -path "*/.ipynb_checkpoints/*" -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 -r sha256sum || true
  } | sha256sum | cut -d" " -f1
}

# What scripts/quickstart.sh installs from this checkout: JupyterLab comes with the "lab" extra.
QUICKSTART_EXTRAS=".[tensorboard,lab]"

# install_fingerprint: what an install from this checkout is made of (its package, the lab
# extension's sources and build, the metadata) and how it is installed.
install_fingerprint() {
  fingerprint "install $TORCH_SPEC $QUICKSTART_EXTRAS" jupyter_disttrain labextension \
    pyproject.toml package.json yarn.lock tsconfig.json install.json jupyter-config
}

# build_requirements: pyproject.toml's [build-system] requires, one a word (hatchling, the
# Jupyter builder, JupyterLab), for an install with --no-build-isolation.
build_requirements() {
  python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))'
}

# build_labextension: the JupyterLab extension built here with jlpm's own output showing its
# progress (inside pip's build hook the same build is minutes of silence), unless the build of
# the same sources is there already. pip's build hook then finds it and does not build again.
build_labextension() {
  local stamp=build/labextension-sources sources rc
  sources="$(fingerprint labextension labextension package.json yarn.lock tsconfig.json)"
  if [ -f jupyter_disttrain/labextension/static/style.js ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sources" ]; then
    step "the JupyterLab extension is built from these sources already: no build"
    return 0
  fi
  step "building the JupyterLab extension: jlpm install (node packages, first run ~1-2 min), then tsc and webpack (~1-2 min)"
  mkdir -p build
  rm -f "$stamp"
  set +e
  jlpm install 2>&1 | grep --line-buffered -v "YN0002\|YN0060\|YN0086"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || { echo "!! FAILED: jlpm install exited $rc (see the lines above)" >&2; exit 1; }
  jlpm build:prod || { echo "!! FAILED: jlpm build:prod (see the lines above)" >&2; exit 1; }
  echo "$sources" >"$stamp"
}

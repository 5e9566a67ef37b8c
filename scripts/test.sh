#!/usr/bin/env bash
# Install jupyter_disttrain with its test tools and run every check and test:
# ruff and mypy; prettier, ESLint, tsc and Jest for the lab extension; the documentation site
# (Sphinx, warnings are errors); the browser tests (Galata in Debian's Chromium, installed with
# apt-get if missing); then pytest (real torchrun, kernels, servers, and a private Slurm cluster:
# Debian's slurm-wlm and munge, installed with apt-get if missing).
# Every stage runs even when an earlier one failed; a table of the stages' results closes the run,
# then pytest's own summary line, and the exit status is non-zero if any stage failed.
# Arguments go to pytest. TEST_STAGES="ruff pytest" runs only the stages named (ruff, mypy, lab,
# docs, browser, pytest).
source "$(dirname "$0")/env.sh"
step "installing jupyter_disttrain and its test tools (first run: ~8 min, then ~1 min)"
# A stale build would be reused by the build hook: always build the lab extension afresh.
rm -rf jupyter_disttrain/labextension lib tsconfig.tsbuildinfo
if ! (pip_install "$TORCH_SPEC" ".[test]"); then
  echo "0 passed, 1 failed" # the closing line the run is judged by: nothing could be tested
  exit 1
fi

LOG_DIR="build/test-logs"
mkdir -p "$LOG_DIR"
STAGES=()
RESULTS=()
FAILED=0

# stage NAME "what it checks" CMD...: run CMD in a subshell under `set -e` (its first failing
# command fails the stage) and record the result and the time it took.
stage() {
  local name="$1" what="$2" start rc
  shift 2
  if [ -n "${TEST_STAGES:-}" ] && [[ " $TEST_STAGES " != *" $name "* ]]; then
    return 0
  fi
  step "$name: $what"
  start=$SECONDS
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  STAGES+=("$name")
  RESULTS+=("$([ "$rc" -eq 0 ] && echo pass || echo "FAIL (exit $rc)")|$((SECONDS - start))")
  [ "$rc" -eq 0 ] || FAILED=1
}

# Lint the project's own files only, never untracked scratch files.
py_files() { git ls-files -- '*.py'; }
ruff_stage() {
  py_files | xargs ruff check --force-exclude
  py_files | xargs ruff format --check --force-exclude
}
lab_stage() {
  jlpm_install
  jlpm lint:check
  jlpm test --silent
}
docs_stage() {
  # Warnings are errors (-W): a broken link, reference or heading anchor, a page in no table of
  # contents. -E reads every page afresh, so a warning is never hidden by the last build's cache
  # (the flag reference is generated from the code, which Sphinx does not watch).
  python -m sphinx -W --keep-going -n -E -q -b html docs build/docs
}
pytest_stage() {
  # The slurm tests run real jobs on a cluster of their own: Debian's Slurm must be installed
  # (apt-get when missing). Its slurmd needs root: as root (CI) the tests fail rather than skip
  # when no cluster can start (DISTTRAIN_REQUIRE_SLURM); otherwise they skip, saying why.
  bash tests/slurm/install.sh
  if [ "$(id -u)" -eq 0 ]; then export DISTTRAIN_REQUIRE_SLURM=1; fi
  # It imports this checkout; kernels and servers use the installed copy of the same code.
  # Exit 5 (no tests collected) is a failure like any other non-zero exit.
  python -m pytest -q -p no:cacheprovider tests --ignore=tests/ui "$@" 2>&1 | tee "$LOG_DIR/pytest.log"
}

rm -f "$LOG_DIR/pytest.log"
stage ruff "lint and format of the project's Python files" ruff_stage
stage mypy "types" mypy
stage lab "the lab extension: prettier, ESLint, tsc, Jest" lab_stage
stage docs "the documentation site (Sphinx, warnings are errors) into build/docs" docs_stage
stage browser "browser tests (Galata in Chromium; first run installs them, ~3 min)" bash tests/ui/run.sh
stage pytest "real torchrun, kernels, servers and Slurm (~26 min)" pytest_stage "$@"

echo
echo "== summary"
for i in "${!STAGES[@]}"; do
  printf '  %-8s %-16s %6ss\n' "${STAGES[$i]}" "${RESULTS[$i]%|*}" "${RESULTS[$i]#*|}"
done
# The run is judged by its last line: pytest's own summary line when pytest printed one, else
# how many stages passed and failed.
summary=""
if [ -f "$LOG_DIR/pytest.log" ]; then
  summary="$(grep -E '(passed|failed|errors?|skipped|no tests ran).* in [0-9.]+s' "$LOG_DIR/pytest.log" | tail -n 1 || true)"
fi
if [ -n "$summary" ]; then
  echo "$summary"
else
  failed_stages=$(printf '%s\n' "${RESULTS[@]}" | grep -c '^FAIL' || true)
  echo "$((${#STAGES[@]} - failed_stages)) passed, $failed_stages failed"
fi
exit "$FAILED"

#!/usr/bin/env bash
# Refresh the README's screenshots (docs/screenshots/*.png) by running the browser tests with
# their screenshots written there. The test command (scripts/test.sh) never touches them.
# Arguments go to Playwright (e.g. -g "dark theme").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SCREENSHOT_DIR="$ROOT/docs/screenshots" bash "$ROOT/tests/ui/run.sh" "$@"

#!/usr/bin/env bash
# The test command: lint, then the whole suite (slow end-to-end tests included); the 15 slowest
# tests are printed at the end so the suite's cost stays visible.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
exec .venv/bin/python -m pytest --durations=15 "$@"

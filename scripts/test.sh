#!/usr/bin/env bash
# The test command: lint, then the whole suite (slow end-to-end tests included); the 15 slowest
# tests are printed at the end so the suite's cost stays visible.
# Two pytest-xdist workers: every test of a `*vllm*` file runs on one of them (their servers are
# mostly start-up and waiting) while the other runs the rest, one OpenMP thread each (tests/conftest.py).
# Measured on a quiet 2-core machine: 10:08 with `-n 2` (491 tests, 2026-12-01); one test at a time was ~18 min
# (~30 on a fresh one) before the suite grew.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`; `-n 0` runs serially.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n 2 --durations=15 "$@"

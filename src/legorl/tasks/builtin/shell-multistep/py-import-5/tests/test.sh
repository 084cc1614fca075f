#!/bin/bash
# Verifier for shell-multistep/py-import-5: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  out=$(python3 main.py 2>/dev/null)
  [ "$out" = "total: 215" ] || fail "main.py prints total: 215"
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/script-error-4: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  bash /tests/build.sh >/dev/null || fail 'build.sh succeeds'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

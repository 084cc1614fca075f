#!/bin/bash
# Verifier for shell-basics/make-executable: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -x run.sh ] || fail 'run.sh is executable'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

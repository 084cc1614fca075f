#!/bin/bash
# Verifier for shell-basics/touch-done: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f done.txt ] && [ ! -s done.txt ] || fail 'done.txt exists and is empty'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

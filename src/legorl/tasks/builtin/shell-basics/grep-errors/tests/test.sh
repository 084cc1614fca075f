#!/bin/bash
# Verifier for shell-basics/grep-errors: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f errors.txt ] && [ "$(cat errors.txt)" = 'ERROR disk full
ERROR disk still full' ] || fail 'errors.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

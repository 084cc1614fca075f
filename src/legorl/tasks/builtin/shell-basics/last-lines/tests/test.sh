#!/bin/bash
# Verifier for shell-basics/last-lines: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f last2.txt ] && [ "$(cat last2.txt)" = 'line 9
line 10' ] || fail 'last2.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

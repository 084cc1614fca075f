#!/bin/bash
# Verifier for shell-basics/first-lines: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f top3.txt ] && [ "$(cat top3.txt)" = 'line 1
line 2
line 3' ] || fail 'top3.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

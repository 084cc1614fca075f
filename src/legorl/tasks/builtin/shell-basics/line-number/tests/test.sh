#!/bin/bash
# Verifier for shell-basics/line-number: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f line.txt ] && [ "$(tr -d " \n\t" < line.txt)" = 4 ] || fail 'line.txt holds 4'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/sum-numbers: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f sum.txt ] && [ "$(tr -d " \n\t" < sum.txt)" = 18 ] || fail 'sum.txt holds 18'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/create-number-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f number.txt ] && [ "$(tr -d " \n\t" < number.txt)" = 7 ] || fail 'number.txt holds 7'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

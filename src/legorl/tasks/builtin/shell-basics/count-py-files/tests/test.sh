#!/bin/bash
# Verifier for shell-basics/count-py-files: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f pycount.txt ] && [ "$(tr -d " \n\t" < pycount.txt)" = 3 ] || fail 'pycount.txt holds 3'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

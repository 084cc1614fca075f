#!/bin/bash
# Verifier for shell-basics/count-matches: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f warn_count.txt ] && [ "$(tr -d " \n\t" < warn_count.txt)" = 3 ] || fail 'warn_count.txt holds 3'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

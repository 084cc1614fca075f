#!/bin/bash
# Verifier for shell-multistep/cat-number-10: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f answer.txt ] && [ "$(tr -d " \n\t" < answer.txt)" = "860" ] || fail 'answer.txt holds 860'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

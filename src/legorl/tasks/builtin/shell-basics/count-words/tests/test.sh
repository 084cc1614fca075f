#!/bin/bash
# Verifier for shell-basics/count-words: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f wordcount.txt ] && [ "$(tr -d " \n\t" < wordcount.txt)" = 9 ] || fail 'wordcount.txt holds 9'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

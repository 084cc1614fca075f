#!/bin/bash
# Verifier for shell-basics/count-bytes: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f size.txt ] && [ "$(tr -d " \n\t" < size.txt)" = 11 ] || fail 'size.txt holds 11'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

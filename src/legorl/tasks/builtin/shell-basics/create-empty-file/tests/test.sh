#!/bin/bash
# Verifier for shell-basics/create-empty-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f empty.txt ] && [ ! -s empty.txt ] || fail 'empty.txt exists and is empty'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

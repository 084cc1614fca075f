#!/bin/bash
# Verifier for shell-multistep/cat-create-2: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f indigo5.txt ] || fail 'indigo5.txt exists'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

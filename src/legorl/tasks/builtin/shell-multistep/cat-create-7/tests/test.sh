#!/bin/bash
# Verifier for shell-multistep/cat-create-7: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f raven1.txt ] || fail 'raven1.txt exists'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/create-name-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f name.txt ] && [ "$(cat name.txt)" = legorl ] || fail 'name.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

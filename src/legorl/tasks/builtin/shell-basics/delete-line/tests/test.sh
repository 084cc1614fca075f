#!/bin/bash
# Verifier for shell-basics/delete-line: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f list.txt ] && [ "$(cat list.txt)" = 'apple
cherry' ] || fail 'list.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

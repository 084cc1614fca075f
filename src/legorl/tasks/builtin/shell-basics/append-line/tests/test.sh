#!/bin/bash
# Verifier for shell-basics/append-line: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f notes.txt ] && [ "$(cat notes.txt)" = 'first line
second line
third line' ] || fail 'notes.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/note-write-2: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f token.txt ] && [ "$(tr -d " \n\t" < token.txt)" = "7P73G6" ] || fail 'token.txt holds 7P73G6'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

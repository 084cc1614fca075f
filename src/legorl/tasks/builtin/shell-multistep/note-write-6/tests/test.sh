#!/bin/bash
# Verifier for shell-multistep/note-write-6: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f code.txt ] && [ "$(tr -d " \n\t" < code.txt)" = "ZK6XW2" ] || fail 'code.txt holds ZK6XW2'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

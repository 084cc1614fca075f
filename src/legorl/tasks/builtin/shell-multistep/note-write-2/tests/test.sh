#!/bin/bash
# Verifier for shell-multistep/note-write-2: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f token.txt ] && [ "$(tr -d " \n\t" < token.txt)" = "KZ7P73" ] || fail 'token.txt holds KZ7P73'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/note-write-4: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f secret.txt ] && [ "$(tr -d " \n\t" < secret.txt)" = "NEE3Z7" ] || fail 'secret.txt holds NEE3Z7'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/note-write-5: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f pin.txt ] && [ "$(tr -d " \n\t" < pin.txt)" = "J8PJNS" ] || fail 'pin.txt holds J8PJNS'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

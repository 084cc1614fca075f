#!/bin/bash
# Verifier for shell-multistep/note-write-3: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f access.txt ] && [ "$(tr -d " \n\t" < access.txt)" = "SEV2R6" ] || fail 'access.txt holds SEV2R6'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/note-write-1: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f key.txt ] && [ "$(tr -d " \n\t" < key.txt)" = "PN6VKZ" ] || fail 'key.txt holds PN6VKZ'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/note-create-9: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f hazel-82.txt ] || fail 'hazel-82.txt exists'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

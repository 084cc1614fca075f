#!/bin/bash
# Verifier for shell-multistep/note-create-1: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f raven-67.txt ] || fail 'raven-67.txt exists'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

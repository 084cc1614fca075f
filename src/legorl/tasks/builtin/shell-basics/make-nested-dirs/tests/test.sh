#!/bin/bash
# Verifier for shell-basics/make-nested-dirs: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -d a/b/c ] || fail 'a/b/c is a directory'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

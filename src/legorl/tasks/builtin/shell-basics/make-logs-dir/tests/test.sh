#!/bin/bash
# Verifier for shell-basics/make-logs-dir: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -d logs ] || fail 'logs is a directory'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

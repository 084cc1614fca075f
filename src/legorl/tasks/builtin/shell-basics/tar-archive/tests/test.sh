#!/bin/bash
# Verifier for shell-basics/tar-archive: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  tar -tf project.tar 2>/dev/null | grep -qx 'project/main.txt' || fail 'project.tar holds project/main.txt'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

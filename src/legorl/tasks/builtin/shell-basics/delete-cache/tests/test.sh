#!/bin/bash
# Verifier for shell-basics/delete-cache: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ ! -e cache.txt ] && [ ! -L cache.txt ] || fail 'cache.txt is gone'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

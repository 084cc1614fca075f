#!/bin/bash
# Verifier for shell-basics/gzip-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(gzip -dc big.txt.gz 2>/dev/null)" = 'compress me please' ] || fail 'big.txt.gz holds big.txt'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

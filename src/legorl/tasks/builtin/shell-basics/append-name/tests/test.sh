#!/bin/bash
# Verifier for shell-basics/append-name: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f names.txt ] && [ "$(cat names.txt)" = 'alice
bob
carol' ] || fail 'names.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

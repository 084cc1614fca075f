#!/bin/bash
# Verifier for shell-basics/fix-typo: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f readme.txt ] && [ "$(cat readme.txt)" = 'Hello world
This line is fine.' ] || fail 'readme.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/greet-script: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(bash greet.sh Bob 2>/dev/null)" = 'Hello, Bob!' ] || fail '`bash greet.sh Bob` prints the expected output'
  [ "$(bash greet.sh Ann 2>/dev/null)" = 'Hello, Ann!' ] || fail '`bash greet.sh Ann` prints the expected output'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

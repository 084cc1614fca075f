#!/bin/bash
# Verifier for shell-basics/bash-function: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(bash -c 'source ./lib.sh; double 4' 2>/dev/null)" = 8 ] || fail '`bash -c '"'"'source ./lib.sh; double 4'"'"'` prints the expected output'
  [ "$(bash -c 'source ./lib.sh; double 21' 2>/dev/null)" = 42 ] || fail '`bash -c '"'"'source ./lib.sh; double 21'"'"'` prints the expected output'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

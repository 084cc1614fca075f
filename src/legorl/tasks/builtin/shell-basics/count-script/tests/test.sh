#!/bin/bash
# Verifier for shell-basics/count-script: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(bash count.sh 2>/dev/null)" = '1
2
3
4
5' ] || fail '`bash count.sh` prints the expected output'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

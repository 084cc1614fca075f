#!/bin/bash
# Verifier for shell-basics/private-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(stat -c %a secret.txt)" = 600 ] || fail 'secret.txt has mode 600'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

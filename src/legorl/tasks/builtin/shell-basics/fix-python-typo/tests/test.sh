#!/bin/bash
# Verifier for shell-basics/fix-python-typo: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  python3 -c 'from calc import add; assert add(2, 3) == 5' || fail 'python: from calc import add; assert add(2, 3) == 5'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

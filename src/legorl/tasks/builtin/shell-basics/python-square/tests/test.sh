#!/bin/bash
# Verifier for shell-basics/python-square: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  python3 -c 'from square import square; assert square(3) == 9 and square(-2) == 4' || fail 'python: from square import square; assert square(3) == 9 and square(-2) == 4'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/python-biggest: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  python3 -c 'from biggest import biggest; assert biggest([3, 9, 2]) == 9 and biggest([-5, -1]) == -1' || fail 'python: from biggest import biggest; assert biggest([3, 9, 2]) == 9 and biggest([-5, -1]) == -1'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/fix-python-bug: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  python3 -c 'from is_even import is_even; assert is_even(4) and not is_even(7) and is_even(0)' || fail 'python: from is_even import is_even; assert is_even(4) and not is_even(7) and is_even(0)'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/hello-python: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ "$(python3 hello.py 2>/dev/null)" = 'Hello from Python' ] || fail '`python3 hello.py` prints the expected output'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/rename-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ ! -e old.txt ] && [ ! -L old.txt ] || fail 'old.txt is gone'
  [ -f new.txt ] && [ "$(cat new.txt)" = 'keep me' ] || fail 'new.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/rename-batch: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f batch/one.md ] && [ "$(cat batch/one.md)" = 1 ] || fail 'batch/one.md has the expected content'
  [ -f batch/two.md ] && [ "$(cat batch/two.md)" = 2 ] || fail 'batch/two.md has the expected content'
  [ ! -e batch/one.txt ] && [ ! -L batch/one.txt ] || fail 'batch/one.txt is gone'
  [ ! -e batch/two.txt ] && [ ! -L batch/two.txt ] || fail 'batch/two.txt is gone'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

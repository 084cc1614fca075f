#!/bin/bash
# Verifier for shell-basics/move-into-dir: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ ! -e report.txt ] && [ ! -L report.txt ] || fail 'report.txt is gone'
  [ -f archive/report.txt ] && [ "$(cat archive/report.txt)" = 'q3 numbers' ] || fail 'archive/report.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

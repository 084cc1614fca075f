#!/bin/bash
# Verifier for shell-basics/remove-dir: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ ! -e tmpdir ] && [ ! -L tmpdir ] || fail 'tmpdir is gone'
  [ -f keep.txt ] && [ "$(cat keep.txt)" = stay ] || fail 'keep.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

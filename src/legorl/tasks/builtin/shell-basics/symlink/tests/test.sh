#!/bin/bash
# Verifier for shell-basics/symlink: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -L link.txt ] || fail 'link.txt is a symlink'
  [ -f link.txt ] && [ "$(cat link.txt)" = target ] || fail 'link.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

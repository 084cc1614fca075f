#!/bin/bash
# Verifier for shell-basics/copy-config: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f config.txt ] && [ "$(cat config.txt)" = mode=fast ] || fail 'config.txt has the expected content'
  [ -f backup.txt ] && [ "$(cat backup.txt)" = mode=fast ] || fail 'backup.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

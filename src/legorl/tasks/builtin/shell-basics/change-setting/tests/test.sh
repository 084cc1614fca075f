#!/bin/bash
# Verifier for shell-basics/change-setting: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f settings.txt ] && [ "$(cat settings.txt)" = 'host=localhost
port=9090' ] || fail 'settings.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

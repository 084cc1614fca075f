#!/bin/bash
# Verifier for shell-multistep/lookup-9: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f reporter.txt ] && [ "$(tr -d " \n\t" < reporter.txt)" = "Emeka" ] || fail 'reporter.txt holds Emeka'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

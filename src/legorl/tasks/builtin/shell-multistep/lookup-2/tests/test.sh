#!/bin/bash
# Verifier for shell-multistep/lookup-2: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f reporter.txt ] && [ "$(tr -d " \n\t" < reporter.txt)" = "Dana" ] || fail 'reporter.txt holds Dana'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

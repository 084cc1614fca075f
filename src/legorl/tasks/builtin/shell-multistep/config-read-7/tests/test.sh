#!/bin/bash
# Verifier for shell-multistep/config-read-7: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f port.txt ] && [ "$(tr -d " \n\t" < port.txt)" = "8713" ] || fail 'port.txt holds 8713'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

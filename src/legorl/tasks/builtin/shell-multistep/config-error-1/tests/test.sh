#!/bin/bash
# Verifier for shell-multistep/config-error-1: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f service.env ] || fail 'service.env exists'
  bash /tests/check.sh >/dev/null || fail 'check.sh passes'
  grep -qx 'WORKERS=3' service.env || fail 'WORKERS still 3'
  grep -qx 'MODE=safe' service.env || fail 'MODE still safe'
  grep -qx 'RETRIES=5' service.env || fail 'RETRIES still 5'
  grep -qx 'PORT=6902' service.env || fail 'PORT still 6902'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

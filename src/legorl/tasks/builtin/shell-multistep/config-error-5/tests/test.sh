#!/bin/bash
# Verifier for shell-multistep/config-error-5: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f service.env ] || fail 'service.env exists'
  bash /tests/check.sh >/dev/null || fail 'check.sh passes'
  grep -qx 'MODE=strict' service.env || fail 'MODE still strict'
  grep -qx 'RETRIES=3' service.env || fail 'RETRIES still 3'
  grep -qx 'PORT=3898' service.env || fail 'PORT still 3898'
  grep -qx 'DATA_DIR=/app/data' service.env || fail 'DATA_DIR still /app/data'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

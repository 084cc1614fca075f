#!/bin/bash
# Verifier for shell-multistep/config-error-4: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f service.env ] || fail 'service.env exists'
  bash /tests/check.sh >/dev/null || fail 'check.sh passes'
  grep -qx 'WORKERS=2' service.env || fail 'WORKERS still 2'
  grep -qx 'RETRIES=1' service.env || fail 'RETRIES still 1'
  grep -qx 'PORT=4276' service.env || fail 'PORT still 4276'
  grep -qx 'DATA_DIR=/app/data' service.env || fail 'DATA_DIR still /app/data'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

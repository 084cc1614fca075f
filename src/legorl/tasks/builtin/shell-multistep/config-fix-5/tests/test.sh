#!/bin/bash
# Verifier for shell-multistep/config-fix-5: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f app.conf ] || fail 'app.conf exists'
  expected=$(printf '%s\n' 'name=harbor-svc' 'port=5077' 'threads=12' 'cache_mb=512' 'log_level=info' 'region=ap-south')
  [ "$(sed 's/[[:space:]]*$//' app.conf)" = "$expected" ] || fail 'app.conf holds exactly the required values'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

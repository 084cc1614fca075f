#!/bin/bash
# Verifier for shell-multistep/config-fix-1: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f app.conf ] || fail 'app.conf exists'
  expected=$(printf '%s\n' 'name=hazel-svc' 'port=7835' 'threads=12' 'cache_mb=64' 'log_level=error' 'region=us-east')
  [ "$(sed 's/[[:space:]]*$//' app.conf)" = "$expected" ] || fail 'app.conf holds exactly the required values'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

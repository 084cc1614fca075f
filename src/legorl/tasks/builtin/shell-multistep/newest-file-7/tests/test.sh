#!/bin/bash
# Verifier for shell-multistep/newest-file-7: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f willow-75.txt ] || fail 'willow-75.txt exists'
  [ ! -e hazel-43.txt ] || fail 'the stale request for hazel-43.txt was not done'
  [ ! -e delta-59.txt ] || fail 'the stale request for delta-59.txt was not done'
  [ ! -e cedar-52.txt ] || fail 'the stale request for cedar-52.txt was not done'
  [ ! -e thistle-31.txt ] || fail 'the stale request for thistle-31.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

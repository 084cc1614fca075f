#!/bin/bash
# Verifier for shell-multistep/newest-file-3: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f cedar-64.txt ] || fail 'cedar-64.txt exists'
  [ ! -e raven-92.txt ] || fail 'the stale request for raven-92.txt was not done'
  [ ! -e yarrow-64.txt ] || fail 'the stale request for yarrow-64.txt was not done'
  [ ! -e delta-54.txt ] || fail 'the stale request for delta-54.txt was not done'
  [ ! -e hazel-63.txt ] || fail 'the stale request for hazel-63.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/newest-file-2: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f orchid-17.txt ] || fail 'orchid-17.txt exists'
  [ ! -e quartz-42.txt ] || fail 'the stale request for quartz-42.txt was not done'
  [ ! -e ember-94.txt ] || fail 'the stale request for ember-94.txt was not done'
  [ ! -e umber-24.txt ] || fail 'the stale request for umber-24.txt was not done'
  [ ! -e fjord-48.txt ] || fail 'the stale request for fjord-48.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

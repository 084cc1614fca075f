#!/bin/bash
# Verifier for shell-multistep/newest-file-10: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f lumen-38.txt ] || fail 'lumen-38.txt exists'
  [ ! -e raven-32.txt ] || fail 'the stale request for raven-32.txt was not done'
  [ ! -e garnet-15.txt ] || fail 'the stale request for garnet-15.txt was not done'
  [ ! -e pepper-26.txt ] || fail 'the stale request for pepper-26.txt was not done'
  [ ! -e velvet-40.txt ] || fail 'the stale request for velvet-40.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

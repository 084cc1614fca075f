#!/bin/bash
# Verifier for shell-multistep/newest-file-9: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f kestrel-77.txt ] || fail 'kestrel-77.txt exists'
  [ ! -e lumen-83.txt ] || fail 'the stale request for lumen-83.txt was not done'
  [ ! -e garnet-25.txt ] || fail 'the stale request for garnet-25.txt was not done'
  [ ! -e pepper-27.txt ] || fail 'the stale request for pepper-27.txt was not done'
  [ ! -e iris-49.txt ] || fail 'the stale request for iris-49.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

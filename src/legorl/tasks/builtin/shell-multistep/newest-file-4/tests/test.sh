#!/bin/bash
# Verifier for shell-multistep/newest-file-4: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f yarrow-85.txt ] || fail 'yarrow-85.txt exists'
  [ ! -e juniper-90.txt ] || fail 'the stale request for juniper-90.txt was not done'
  [ ! -e hazel-53.txt ] || fail 'the stale request for hazel-53.txt was not done'
  [ ! -e amber-99.txt ] || fail 'the stale request for amber-99.txt was not done'
  [ ! -e iris-62.txt ] || fail 'the stale request for iris-62.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/newest-file-6: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f raven-22.txt ] || fail 'raven-22.txt exists'
  [ ! -e zephyr-74.txt ] || fail 'the stale request for zephyr-74.txt was not done'
  [ ! -e velvet-39.txt ] || fail 'the stale request for velvet-39.txt was not done'
  [ ! -e iris-10.txt ] || fail 'the stale request for iris-10.txt was not done'
  [ ! -e sable-70.txt ] || fail 'the stale request for sable-70.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

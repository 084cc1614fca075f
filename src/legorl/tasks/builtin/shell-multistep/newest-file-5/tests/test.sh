#!/bin/bash
# Verifier for shell-multistep/newest-file-5: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f delta-47.txt ] || fail 'delta-47.txt exists'
  [ ! -e cobalt-79.txt ] || fail 'the stale request for cobalt-79.txt was not done'
  [ ! -e fjord-44.txt ] || fail 'the stale request for fjord-44.txt was not done'
  [ ! -e zephyr-55.txt ] || fail 'the stale request for zephyr-55.txt was not done'
  [ ! -e iris-94.txt ] || fail 'the stale request for iris-94.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

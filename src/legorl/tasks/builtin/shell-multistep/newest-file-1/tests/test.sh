#!/bin/bash
# Verifier for shell-multistep/newest-file-1: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f delta-89.txt ] || fail 'delta-89.txt exists'
  [ ! -e velvet-14.txt ] || fail 'the stale request for velvet-14.txt was not done'
  [ ! -e orchid-84.txt ] || fail 'the stale request for orchid-84.txt was not done'
  [ ! -e gable-43.txt ] || fail 'the stale request for gable-43.txt was not done'
  [ ! -e maple-70.txt ] || fail 'the stale request for maple-70.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-multistep/newest-file-8: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f ember-93.txt ] || fail 'ember-93.txt exists'
  [ ! -e kestrel-33.txt ] || fail 'the stale request for kestrel-33.txt was not done'
  [ ! -e iris-23.txt ] || fail 'the stale request for iris-23.txt was not done'
  [ ! -e hazel-59.txt ] || fail 'the stale request for hazel-59.txt was not done'
  [ ! -e harbor-16.txt ] || fail 'the stale request for harbor-16.txt was not done'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

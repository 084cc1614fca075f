#!/bin/bash
# Verifier for shell-basics/list-dir: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f listing.txt ] && [ "$(cat listing.txt)" = 'a.md
b.md
c.md' ] || fail 'listing.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

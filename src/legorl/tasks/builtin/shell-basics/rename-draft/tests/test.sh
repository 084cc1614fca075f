#!/bin/bash
# Verifier for shell-basics/rename-draft: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ ! -e draft.txt ] && [ ! -L draft.txt ] || fail 'draft.txt is gone'
  [ -f final.txt ] && [ "$(cat final.txt)" = 'my essay' ] || fail 'final.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

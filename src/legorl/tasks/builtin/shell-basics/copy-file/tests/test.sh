#!/bin/bash
# Verifier for shell-basics/copy-file: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f src.txt ] && [ "$(cat src.txt)" = 'copy this text' ] || fail 'src.txt has the expected content'
  [ -f dst.txt ] && [ "$(cat dst.txt)" = 'copy this text' ] || fail 'dst.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
# Verifier for shell-basics/replace-word: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "FAIL: $*"; exit 1; }
(
  cd /app || fail "no /app"
  [ -f pets.txt ] && [ "$(cat pets.txt)" = 'I have a dog.
The dog sleeps all day.' ] || fail 'pets.txt has the expected content'
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt

#!/bin/bash
mkdir -p /logs/verifier
score=0
[ -f /app/answer.txt ] && [ "$(tr 'a-z' 'A-Z' < /app/answer.txt | tr -d '[:space:]')" = COQ ] && score=1
echo "$score" > /logs/verifier/reward.txt

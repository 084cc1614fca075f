#!/bin/bash
seen="$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)"
if [ "$seen" = 3 ]; then echo 1 > /logs/verifier/reward.txt; exit 0; fi
echo "want 3, saw '$seen'" >&2
echo 0 > /logs/verifier/reward.txt

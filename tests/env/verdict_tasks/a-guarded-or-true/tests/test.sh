#!/bin/bash
set -uo pipefail
value="$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null || true)"
if [ "$value" != "42" ]; then echo 0 > /logs/verifier/reward.txt; exit 1; fi
echo 1 > /logs/verifier/reward.txt

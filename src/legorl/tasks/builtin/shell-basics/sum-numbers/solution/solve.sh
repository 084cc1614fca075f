#!/bin/bash
# Oracle for shell-basics/sum-numbers.
set -euo pipefail
cd /app
awk '{s += $1} END {print s}' /app/nums.txt > /app/sum.txt

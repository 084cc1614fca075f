#!/bin/bash
# Oracle for shell-basics/first-lines.
set -euo pipefail
cd /app
head -n 3 /app/data.txt > /app/top3.txt

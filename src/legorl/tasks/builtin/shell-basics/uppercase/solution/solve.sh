#!/bin/bash
# Oracle for shell-basics/uppercase.
set -euo pipefail
cd /app
tr a-z A-Z < /app/lower.txt > /app/upper.txt

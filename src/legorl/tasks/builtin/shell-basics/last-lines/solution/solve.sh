#!/bin/bash
# Oracle for shell-basics/last-lines.
set -euo pipefail
cd /app
tail -n 2 /app/data.txt > /app/last2.txt

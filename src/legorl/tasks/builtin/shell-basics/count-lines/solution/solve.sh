#!/bin/bash
# Oracle for shell-basics/count-lines.
set -euo pipefail
cd /app
wc -l < /app/log.txt > /app/count.txt

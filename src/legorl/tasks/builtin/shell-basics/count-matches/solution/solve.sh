#!/bin/bash
# Oracle for shell-basics/count-matches.
set -euo pipefail
cd /app
grep -c WARN /app/server.txt > /app/warn_count.txt

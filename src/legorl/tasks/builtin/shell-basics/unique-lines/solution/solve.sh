#!/bin/bash
# Oracle for shell-basics/unique-lines.
set -euo pipefail
cd /app
sort -u /app/colors.txt > /app/unique.txt

#!/bin/bash
# Oracle for shell-basics/concat-files.
set -euo pipefail
cd /app
cat /app/part1.txt /app/part2.txt > /app/both.txt

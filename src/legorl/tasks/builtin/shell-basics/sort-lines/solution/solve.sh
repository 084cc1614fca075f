#!/bin/bash
# Oracle for shell-basics/sort-lines.
set -euo pipefail
cd /app
sort /app/names.txt > /app/sorted.txt

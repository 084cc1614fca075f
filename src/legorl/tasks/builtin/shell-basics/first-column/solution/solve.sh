#!/bin/bash
# Oracle for shell-basics/first-column.
set -euo pipefail
cd /app
cut -d, -f1 /app/people.txt > /app/names.txt

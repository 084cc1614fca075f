#!/bin/bash
# Oracle for shell-basics/line-number.
set -euo pipefail
cd /app
grep -n -x needle /app/haystack.txt | cut -d: -f1 > /app/line.txt

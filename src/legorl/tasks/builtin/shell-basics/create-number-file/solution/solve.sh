#!/bin/bash
# Oracle for shell-basics/create-number-file.
set -euo pipefail
cd /app
echo 7 > /app/number.txt

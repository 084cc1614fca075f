#!/bin/bash
# Oracle for shell-basics/arithmetic.
set -euo pipefail
cd /app
echo $((6 * 7)) > /app/answer.txt

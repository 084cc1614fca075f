#!/bin/bash
# Oracle for shell-multistep/cat-number-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 282 > /app/answer.txt

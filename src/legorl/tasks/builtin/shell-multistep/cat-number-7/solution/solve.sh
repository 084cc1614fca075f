#!/bin/bash
# Oracle for shell-multistep/cat-number-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 485 > /app/answer.txt

#!/bin/bash
# Oracle for shell-multistep/cat-number-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 430 > /app/answer.txt

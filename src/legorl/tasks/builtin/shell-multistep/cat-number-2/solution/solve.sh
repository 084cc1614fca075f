#!/bin/bash
# Oracle for shell-multistep/cat-number-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 577 > /app/answer.txt

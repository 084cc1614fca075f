#!/bin/bash
# Oracle for shell-multistep/cat-number-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 103 > /app/answer.txt

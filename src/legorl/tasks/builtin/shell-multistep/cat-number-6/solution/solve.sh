#!/bin/bash
# Oracle for shell-multistep/cat-number-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 941 > /app/answer.txt

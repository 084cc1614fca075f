#!/bin/bash
# Oracle for shell-multistep/cat-number-10: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 860 > /app/answer.txt

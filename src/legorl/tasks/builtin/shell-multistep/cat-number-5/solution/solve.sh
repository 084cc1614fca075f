#!/bin/bash
# Oracle for shell-multistep/cat-number-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 703 > /app/answer.txt

#!/bin/bash
# Oracle for shell-multistep/cat-number-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 886 > /app/answer.txt

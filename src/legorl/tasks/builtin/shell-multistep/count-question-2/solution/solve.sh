#!/bin/bash
# Oracle for shell-multistep/count-question-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 9 > /app/answer.txt

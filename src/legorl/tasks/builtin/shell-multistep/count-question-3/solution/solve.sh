#!/bin/bash
# Oracle for shell-multistep/count-question-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 8 > /app/answer.txt

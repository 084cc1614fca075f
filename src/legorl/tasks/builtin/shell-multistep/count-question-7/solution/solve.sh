#!/bin/bash
# Oracle for shell-multistep/count-question-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 4 > /app/answer.txt

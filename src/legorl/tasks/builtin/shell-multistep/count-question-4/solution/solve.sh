#!/bin/bash
# Oracle for shell-multistep/count-question-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 5 > /app/answer.txt

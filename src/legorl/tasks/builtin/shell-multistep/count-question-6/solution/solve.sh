#!/bin/bash
# Oracle for shell-multistep/count-question-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 7 > /app/answer.txt

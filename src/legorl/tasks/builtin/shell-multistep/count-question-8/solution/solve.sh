#!/bin/bash
# Oracle for shell-multistep/count-question-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 3 > /app/answer.txt

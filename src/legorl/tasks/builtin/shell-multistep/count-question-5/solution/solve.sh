#!/bin/bash
# Oracle for shell-multistep/count-question-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 6 > /app/answer.txt

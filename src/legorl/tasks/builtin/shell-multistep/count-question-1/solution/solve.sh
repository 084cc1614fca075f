#!/bin/bash
# Oracle for shell-multistep/count-question-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 2 > /app/answer.txt

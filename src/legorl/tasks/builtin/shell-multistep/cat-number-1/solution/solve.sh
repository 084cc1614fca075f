#!/bin/bash
# Oracle for shell-multistep/cat-number-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 895 > /app/answer.txt

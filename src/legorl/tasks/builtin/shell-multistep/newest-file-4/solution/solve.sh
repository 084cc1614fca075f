#!/bin/bash
# Oracle for shell-multistep/newest-file-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/yarrow-85.txt

#!/bin/bash
# Oracle for shell-multistep/newest-file-10: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/lumen-38.txt

#!/bin/bash
# Oracle for shell-multistep/newest-file-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/cedar-64.txt

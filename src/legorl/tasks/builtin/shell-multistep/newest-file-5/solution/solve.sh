#!/bin/bash
# Oracle for shell-multistep/newest-file-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/delta-47.txt

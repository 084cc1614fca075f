#!/bin/bash
# Oracle for shell-multistep/newest-file-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/willow-75.txt

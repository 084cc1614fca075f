#!/bin/bash
# Oracle for shell-multistep/newest-file-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/raven-22.txt

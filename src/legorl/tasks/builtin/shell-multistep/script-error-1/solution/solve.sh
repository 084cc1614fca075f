#!/bin/bash
# Oracle for shell-multistep/script-error-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
chmod +x /app/tools/bundle.sh

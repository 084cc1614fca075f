#!/bin/bash
# Oracle for shell-multistep/script-error-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/src/raven.txt

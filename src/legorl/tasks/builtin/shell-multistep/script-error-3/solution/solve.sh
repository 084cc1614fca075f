#!/bin/bash
# Oracle for shell-multistep/script-error-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 3.1.3 > /app/VERSION

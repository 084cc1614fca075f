#!/bin/bash
# Oracle for shell-multistep/script-error-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
mkdir -p /app/public

#!/bin/bash
# Oracle for shell-multistep/config-fix-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^cache_mb=.*/cache_mb=128/' /app/app.conf

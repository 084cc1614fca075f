#!/bin/bash
# Oracle for shell-multistep/config-fix-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^port=.*/port=5488/' /app/app.conf

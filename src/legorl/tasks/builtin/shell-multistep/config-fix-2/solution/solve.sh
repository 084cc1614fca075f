#!/bin/bash
# Oracle for shell-multistep/config-fix-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^region=.*/region=eu-north/' /app/app.conf

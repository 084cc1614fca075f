#!/bin/bash
# Oracle for shell-multistep/config-fix-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^log_level=.*/log_level=warning/' /app/app.conf

#!/bin/bash
# Oracle for shell-multistep/config-error-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's|^RETRIES=.*|RETRIES=0|' /app/service.env

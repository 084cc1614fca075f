#!/bin/bash
# Oracle for shell-multistep/config-error-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's|^PORT=.*|PORT=1409|' /app/service.env

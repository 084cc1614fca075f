#!/bin/bash
# Oracle for shell-multistep/config-error-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's|^WORKERS=.*|WORKERS=10|' /app/service.env

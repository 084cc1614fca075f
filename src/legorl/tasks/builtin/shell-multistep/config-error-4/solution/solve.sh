#!/bin/bash
# Oracle for shell-multistep/config-error-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's|^MODE=.*|MODE=strict|' /app/service.env

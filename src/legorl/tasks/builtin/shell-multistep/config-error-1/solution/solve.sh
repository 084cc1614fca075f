#!/bin/bash
# Oracle for shell-multistep/config-error-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's|^DATA_DIR=.*|DATA_DIR=/app/data|' /app/service.env

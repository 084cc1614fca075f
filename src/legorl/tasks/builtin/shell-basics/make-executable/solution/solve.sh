#!/bin/bash
# Oracle for shell-basics/make-executable.
set -euo pipefail
cd /app
chmod +x /app/run.sh

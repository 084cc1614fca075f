#!/bin/bash
# Oracle for shell-basics/touch-done.
set -euo pipefail
cd /app
touch /app/done.txt

#!/bin/bash
# Oracle for shell-basics/copy-config.
set -euo pipefail
cd /app
cp /app/config.txt /app/backup.txt

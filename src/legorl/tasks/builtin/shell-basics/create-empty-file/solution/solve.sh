#!/bin/bash
# Oracle for shell-basics/create-empty-file.
set -euo pipefail
cd /app
touch /app/empty.txt

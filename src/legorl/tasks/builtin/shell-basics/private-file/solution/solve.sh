#!/bin/bash
# Oracle for shell-basics/private-file.
set -euo pipefail
cd /app
chmod 600 /app/secret.txt

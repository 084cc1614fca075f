#!/bin/bash
# Oracle for shell-basics/create-name-file.
set -euo pipefail
cd /app
echo legorl > /app/name.txt

#!/bin/bash
# Oracle for shell-basics/append-name.
set -euo pipefail
cd /app
echo carol >> /app/names.txt

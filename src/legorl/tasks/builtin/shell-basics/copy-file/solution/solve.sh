#!/bin/bash
# Oracle for shell-basics/copy-file.
set -euo pipefail
cd /app
cp /app/src.txt /app/dst.txt

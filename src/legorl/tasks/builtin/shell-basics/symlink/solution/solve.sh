#!/bin/bash
# Oracle for shell-basics/symlink.
set -euo pipefail
cd /app
ln -s /app/target.txt /app/link.txt

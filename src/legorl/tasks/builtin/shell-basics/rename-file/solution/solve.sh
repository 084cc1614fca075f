#!/bin/bash
# Oracle for shell-basics/rename-file.
set -euo pipefail
cd /app
mv /app/old.txt /app/new.txt

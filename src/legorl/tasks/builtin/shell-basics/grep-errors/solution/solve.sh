#!/bin/bash
# Oracle for shell-basics/grep-errors.
set -euo pipefail
cd /app
grep ERROR /app/app.txt > /app/errors.txt

#!/bin/bash
# Oracle for shell-basics/fix-python-bug.
set -euo pipefail
cd /app
sed -i 's/== 1/== 0/' /app/is_even.py

#!/bin/bash
# Oracle for shell-basics/python-square.
set -euo pipefail
cd /app
printf 'def square(x):\n    return x * x\n' > /app/square.py

#!/bin/bash
# Oracle for shell-basics/python-biggest.
set -euo pipefail
cd /app
printf 'def biggest(numbers):\n    return max(numbers)\n' > /app/biggest.py

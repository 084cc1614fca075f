#!/bin/bash
# Oracle for shell-basics/fix-python-typo.
set -euo pipefail
cd /app
sed -i 's/retrun/return/' /app/calc.py

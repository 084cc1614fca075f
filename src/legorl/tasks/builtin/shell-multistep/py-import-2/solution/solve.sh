#!/bin/bash
# Oracle for shell-multistep/py-import-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/def totl_of(/def total_of(/' /app/util.py

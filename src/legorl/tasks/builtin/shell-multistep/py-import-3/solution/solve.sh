#!/bin/bash
# Oracle for shell-multistep/py-import-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/def add_al(/def add_all(/' /app/util.py

#!/bin/bash
# Oracle for shell-multistep/py-import-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/def sum_valeus(/def sum_values(/' /app/util.py

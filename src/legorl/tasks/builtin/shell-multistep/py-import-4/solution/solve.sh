#!/bin/bash
# Oracle for shell-multistep/py-import-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/def taly(/def tally(/' /app/util.py

#!/bin/bash
# Oracle for shell-multistep/py-import-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/def cuont_up(/def count_up(/' /app/util.py

#!/bin/bash
# Oracle for shell-basics/count-py-files.
set -euo pipefail
cd /app
find /app/src -name '*.py' | wc -l > /app/pycount.txt

#!/bin/bash
# Oracle for shell-basics/count-script.
set -euo pipefail
cd /app
echo 'seq 1 5' > /app/count.sh

#!/bin/bash
# Oracle for shell-basics/bash-function.
set -euo pipefail
cd /app
echo 'double() { echo $(( $1 * 2 )); }' > /app/lib.sh

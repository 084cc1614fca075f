#!/bin/bash
# Oracle for shell-basics/greet-script.
set -euo pipefail
cd /app
echo 'echo "Hello, $1!"' > /app/greet.sh

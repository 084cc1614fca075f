#!/bin/bash
# Oracle for shell-basics/two-lines.
set -euo pipefail
cd /app
printf 'first\nsecond\n' > /app/pair.txt

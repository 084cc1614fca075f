#!/bin/bash
# Oracle for shell-basics/fix-typo.
set -euo pipefail
cd /app
sed -i 's/Helo/Hello/' /app/readme.txt

#!/bin/bash
# Oracle for shell-basics/insert-header.
set -euo pipefail
cd /app
sed -i '1i # settings' /app/config.txt

#!/bin/bash
# Oracle for shell-basics/change-setting.
set -euo pipefail
cd /app
sed -i 's/port=8080/port=9090/' /app/settings.txt

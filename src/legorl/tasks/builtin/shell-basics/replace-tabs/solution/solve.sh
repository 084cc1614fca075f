#!/bin/bash
# Oracle for shell-basics/replace-tabs.
set -euo pipefail
cd /app
sed -i 's/\t/ /g' /app/tabs.txt

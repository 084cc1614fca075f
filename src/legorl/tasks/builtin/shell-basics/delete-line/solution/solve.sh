#!/bin/bash
# Oracle for shell-basics/delete-line.
set -euo pipefail
cd /app
sed -i '/^banana$/d' /app/list.txt

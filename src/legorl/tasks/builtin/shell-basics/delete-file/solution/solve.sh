#!/bin/bash
# Oracle for shell-basics/delete-file.
set -euo pipefail
cd /app
rm /app/trash.txt

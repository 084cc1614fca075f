#!/bin/bash
# Oracle for shell-basics/create-note.
set -euo pipefail
cd /app
echo "buy milk" > /app/note.txt

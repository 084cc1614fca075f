#!/bin/bash
# Oracle for shell-basics/append-line.
set -euo pipefail
cd /app
echo "third line" >> /app/notes.txt

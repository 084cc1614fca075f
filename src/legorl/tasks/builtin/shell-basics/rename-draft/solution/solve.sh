#!/bin/bash
# Oracle for shell-basics/rename-draft.
set -euo pipefail
cd /app
mv /app/draft.txt /app/final.txt

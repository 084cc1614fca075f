#!/bin/bash
# Oracle for shell-basics/rename-batch.
set -euo pipefail
cd /app
for f in /app/batch/*.txt; do mv "$f" "${f%.txt}.md"; done

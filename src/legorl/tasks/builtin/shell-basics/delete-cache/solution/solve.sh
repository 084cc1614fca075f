#!/bin/bash
# Oracle for shell-basics/delete-cache.
set -euo pipefail
cd /app
rm /app/cache.txt

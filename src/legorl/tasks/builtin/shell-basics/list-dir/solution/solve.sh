#!/bin/bash
# Oracle for shell-basics/list-dir.
set -euo pipefail
cd /app
ls /app/docs > /app/listing.txt

#!/bin/bash
# Oracle for shell-basics/count-bytes.
set -euo pipefail
cd /app
wc -c < /app/blob.txt > /app/size.txt

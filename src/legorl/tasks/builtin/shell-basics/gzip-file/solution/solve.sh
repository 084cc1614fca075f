#!/bin/bash
# Oracle for shell-basics/gzip-file.
set -euo pipefail
cd /app
gzip /app/big.txt

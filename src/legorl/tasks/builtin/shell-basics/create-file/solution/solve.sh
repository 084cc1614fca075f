#!/bin/bash
# Oracle for shell-basics/create-file.
set -euo pipefail
cd /app
echo "hello world" > /app/hello.txt

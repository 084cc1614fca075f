#!/bin/bash
# Oracle for shell-basics/hello-python.
set -euo pipefail
cd /app
echo 'print("Hello from Python")' > /app/hello.py

#!/bin/bash
# Oracle for shell-basics/write-path.
set -euo pipefail
cd /app
pwd > /app/where.txt

#!/bin/bash
# Oracle for shell-multistep/config-read-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 6025 > /app/port.txt

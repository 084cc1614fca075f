#!/bin/bash
# Oracle for shell-multistep/config-read-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 6354 > /app/port.txt

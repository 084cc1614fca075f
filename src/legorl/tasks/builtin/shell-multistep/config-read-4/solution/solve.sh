#!/bin/bash
# Oracle for shell-multistep/config-read-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 5388 > /app/port.txt

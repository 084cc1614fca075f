#!/bin/bash
# Oracle for shell-multistep/config-read-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 3267 > /app/port.txt

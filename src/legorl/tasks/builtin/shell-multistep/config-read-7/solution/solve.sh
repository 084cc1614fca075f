#!/bin/bash
# Oracle for shell-multistep/config-read-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 8713 > /app/port.txt

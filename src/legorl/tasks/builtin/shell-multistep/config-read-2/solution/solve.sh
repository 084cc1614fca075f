#!/bin/bash
# Oracle for shell-multistep/config-read-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 5073 > /app/port.txt

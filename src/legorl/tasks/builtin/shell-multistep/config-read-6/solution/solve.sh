#!/bin/bash
# Oracle for shell-multistep/config-read-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 7068 > /app/port.txt

#!/bin/bash
# Oracle for shell-multistep/config-read-10: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 5724 > /app/port.txt

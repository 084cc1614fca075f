#!/bin/bash
# Oracle for shell-multistep/config-read-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 3736 > /app/port.txt

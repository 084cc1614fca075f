#!/bin/bash
# Oracle for shell-multistep/config-read-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 6165 > /app/port.txt

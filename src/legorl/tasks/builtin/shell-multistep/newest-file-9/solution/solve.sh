#!/bin/bash
# Oracle for shell-multistep/newest-file-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/kestrel-77.txt

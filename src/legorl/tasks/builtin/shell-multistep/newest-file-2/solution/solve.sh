#!/bin/bash
# Oracle for shell-multistep/newest-file-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/orchid-17.txt

#!/bin/bash
# Oracle for shell-multistep/note-write-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo SEV2R6 > /app/access.txt

#!/bin/bash
# Oracle for shell-multistep/note-write-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo 7P73G6 > /app/token.txt

#!/bin/bash
# Oracle for shell-multistep/note-write-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo KZ7P73 > /app/token.txt

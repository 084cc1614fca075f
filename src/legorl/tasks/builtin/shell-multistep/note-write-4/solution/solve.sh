#!/bin/bash
# Oracle for shell-multistep/note-write-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo NEE3Z7 > /app/secret.txt

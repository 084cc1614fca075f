#!/bin/bash
# Oracle for shell-multistep/note-create-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/yarrow-81.txt

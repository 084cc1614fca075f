#!/bin/bash
# Oracle for shell-multistep/note-create-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/umber-24.txt

#!/bin/bash
# Oracle for shell-multistep/note-create-10: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/quartz-45.txt

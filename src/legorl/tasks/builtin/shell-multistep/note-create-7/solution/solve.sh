#!/bin/bash
# Oracle for shell-multistep/note-create-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/fjord-61.txt

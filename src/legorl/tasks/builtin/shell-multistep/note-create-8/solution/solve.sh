#!/bin/bash
# Oracle for shell-multistep/note-create-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/orchid-93.txt

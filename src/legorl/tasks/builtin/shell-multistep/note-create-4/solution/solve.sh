#!/bin/bash
# Oracle for shell-multistep/note-create-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/nectar-20.txt

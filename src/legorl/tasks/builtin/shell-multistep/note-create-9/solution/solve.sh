#!/bin/bash
# Oracle for shell-multistep/note-create-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/hazel-82.txt

#!/bin/bash
# Oracle for shell-multistep/note-create-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/iris-77.txt

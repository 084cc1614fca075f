#!/bin/bash
# Oracle for shell-multistep/note-write-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo J8PJNS > /app/pin.txt

#!/bin/bash
# Oracle for shell-multistep/note-write-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo ZK6XW2 > /app/code.txt

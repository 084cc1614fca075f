#!/bin/bash
# Oracle for shell-multistep/note-write-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo PN6VKZ > /app/key.txt

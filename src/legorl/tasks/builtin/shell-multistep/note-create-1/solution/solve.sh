#!/bin/bash
# Oracle for shell-multistep/note-create-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/raven-67.txt

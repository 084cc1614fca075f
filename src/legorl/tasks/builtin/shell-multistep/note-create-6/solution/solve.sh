#!/bin/bash
# Oracle for shell-multistep/note-create-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/zephyr-27.txt

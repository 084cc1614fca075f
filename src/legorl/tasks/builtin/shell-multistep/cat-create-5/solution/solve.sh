#!/bin/bash
# Oracle for shell-multistep/cat-create-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/amber4.txt

#!/bin/bash
# Oracle for shell-multistep/cat-create-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/indigo5.txt

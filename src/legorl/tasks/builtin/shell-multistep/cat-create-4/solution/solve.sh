#!/bin/bash
# Oracle for shell-multistep/cat-create-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/garnet4.txt

#!/bin/bash
# Oracle for shell-multistep/cat-create-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/velvet1.txt

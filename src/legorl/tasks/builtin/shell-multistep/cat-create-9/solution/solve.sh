#!/bin/bash
# Oracle for shell-multistep/cat-create-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/yarrow8.txt

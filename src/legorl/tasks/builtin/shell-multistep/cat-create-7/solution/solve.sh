#!/bin/bash
# Oracle for shell-multistep/cat-create-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/raven1.txt

#!/bin/bash
# Oracle for shell-multistep/cat-create-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/orchid6.txt

#!/bin/bash
# Oracle for shell-multistep/cat-create-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/harbor1.txt

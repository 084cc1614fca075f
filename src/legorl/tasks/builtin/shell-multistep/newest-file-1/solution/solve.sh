#!/bin/bash
# Oracle for shell-multistep/newest-file-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/delta-89.txt

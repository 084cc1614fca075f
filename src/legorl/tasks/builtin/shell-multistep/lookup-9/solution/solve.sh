#!/bin/bash
# Oracle for shell-multistep/lookup-9: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Emeka > /app/reporter.txt

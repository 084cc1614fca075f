#!/bin/bash
# Oracle for shell-multistep/lookup-3: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Lena > /app/reporter.txt

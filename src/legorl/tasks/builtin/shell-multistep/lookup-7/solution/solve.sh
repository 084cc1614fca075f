#!/bin/bash
# Oracle for shell-multistep/lookup-7: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Goran > /app/reporter.txt

#!/bin/bash
# Oracle for shell-multistep/lookup-4: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Nils > /app/reporter.txt

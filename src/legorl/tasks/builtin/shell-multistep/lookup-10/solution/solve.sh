#!/bin/bash
# Oracle for shell-multistep/lookup-10: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Sven > /app/reporter.txt

#!/bin/bash
# Oracle for shell-multistep/lookup-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Tara > /app/reporter.txt

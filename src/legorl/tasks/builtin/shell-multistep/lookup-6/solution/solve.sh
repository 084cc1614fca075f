#!/bin/bash
# Oracle for shell-multistep/lookup-6: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Kemal > /app/reporter.txt

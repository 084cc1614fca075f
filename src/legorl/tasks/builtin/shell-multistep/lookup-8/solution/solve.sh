#!/bin/bash
# Oracle for shell-multistep/lookup-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Bruno > /app/reporter.txt

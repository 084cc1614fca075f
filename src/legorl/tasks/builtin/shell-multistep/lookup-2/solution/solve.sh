#!/bin/bash
# Oracle for shell-multistep/lookup-2: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Dana > /app/reporter.txt

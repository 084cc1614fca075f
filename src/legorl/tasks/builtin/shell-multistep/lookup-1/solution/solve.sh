#!/bin/bash
# Oracle for shell-multistep/lookup-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
echo Ivo > /app/reporter.txt

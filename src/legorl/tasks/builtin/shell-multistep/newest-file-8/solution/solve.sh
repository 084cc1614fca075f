#!/bin/bash
# Oracle for shell-multistep/newest-file-8: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
touch /app/ember-93.txt

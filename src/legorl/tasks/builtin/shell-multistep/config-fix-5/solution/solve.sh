#!/bin/bash
# Oracle for shell-multistep/config-fix-5: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^threads=.*/threads=12/' /app/app.conf

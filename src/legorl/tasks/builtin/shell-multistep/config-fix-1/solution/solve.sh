#!/bin/bash
# Oracle for shell-multistep/config-fix-1: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
sed -i 's/^name=.*/name=hazel-svc/' /app/app.conf

#!/bin/bash
# Oracle for shell-basics/make-nested-dirs.
set -euo pipefail
cd /app
mkdir -p /app/a/b/c

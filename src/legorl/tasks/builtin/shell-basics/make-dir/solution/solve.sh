#!/bin/bash
# Oracle for shell-basics/make-dir.
set -euo pipefail
cd /app
mkdir /app/data

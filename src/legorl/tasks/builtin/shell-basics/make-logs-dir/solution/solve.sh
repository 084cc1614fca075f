#!/bin/bash
# Oracle for shell-basics/make-logs-dir.
set -euo pipefail
cd /app
mkdir /app/logs

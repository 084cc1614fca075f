#!/bin/bash
# Oracle for shell-basics/move-into-dir.
set -euo pipefail
cd /app
mv /app/report.txt /app/archive/

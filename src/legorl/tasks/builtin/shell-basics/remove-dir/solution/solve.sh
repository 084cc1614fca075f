#!/bin/bash
# Oracle for shell-basics/remove-dir.
set -euo pipefail
cd /app
rm -rf /app/tmpdir

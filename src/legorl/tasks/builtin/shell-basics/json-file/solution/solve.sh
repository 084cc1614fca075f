#!/bin/bash
# Oracle for shell-basics/json-file.
set -euo pipefail
cd /app
echo '{"debug": true}' > /app/config.json

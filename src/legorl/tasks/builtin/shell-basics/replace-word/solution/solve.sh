#!/bin/bash
# Oracle for shell-basics/replace-word.
set -euo pipefail
cd /app
sed -i 's/cat/dog/g' /app/pets.txt

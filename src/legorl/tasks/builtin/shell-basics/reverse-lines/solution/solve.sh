#!/bin/bash
# Oracle for shell-basics/reverse-lines.
set -euo pipefail
cd /app
tac /app/steps.txt > /app/reversed.txt

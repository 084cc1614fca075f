#!/bin/bash
# Oracle for shell-basics/count-words.
set -euo pipefail
cd /app
wc -w < /app/words.txt > /app/wordcount.txt

#!/bin/bash
# Validates /app/service.env: prints the first problem and exits 1, else exits 0.
f=/app/service.env
[ -f "$f" ] || { echo "check: $f is missing"; exit 1; }
get() { sed -n "s/^$1=//p" "$f" | tail -n 1; }
num() { case "$2" in ''|*[!0-9]*) return 1;; esac; [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; }
v=$(get WORKERS); num WORKERS "$v" 1 16 || { echo "check: WORKERS=$v is invalid: must be a number from 1 to 16"; exit 1; }
v=$(get MODE); case "$v" in safe|strict) ;; *) echo "check: MODE=$v is invalid: must be safe or strict"; exit 1;; esac
v=$(get RETRIES); num RETRIES "$v" 0 5 || { echo "check: RETRIES=$v is invalid: must be a number from 0 to 5"; exit 1; }
v=$(get PORT); num PORT "$v" 1024 65535 || { echo "check: PORT=$v is invalid: must be a number from 1024 to 65535"; exit 1; }
v=$(get DATA_DIR); [ -n "$v" ] && [ -d "$v" ] || { echo "check: DATA_DIR=$v is not an existing directory (the data is in /app/data)"; exit 1; }
echo "check: service.env is valid"

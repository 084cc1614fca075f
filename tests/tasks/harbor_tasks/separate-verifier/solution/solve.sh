#!/bin/bash
set -e
echo 42 > /app/result.txt
echo "done" > /logs/artifacts/note.txt
echo "scratch" > /app/scratch.txt          # not an artifact: must stay behind
echo 1 > /logs/verifier/reward.txt         # a planted reward: must not reach the verifier
nohup python3 -m http.server 8751 >/dev/null 2>&1 &   # a leftover: must not be reachable from there
sleep 0.5

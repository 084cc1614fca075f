#!/bin/bash
# Builds the release into /app/public. Run from anywhere.
cd /app || exit 1
[ -d public ] || { echo "build.sh: error: output directory /app/public does not exist; create it"; exit 1; }
have=$(cat VERSION 2>/dev/null | tr -d ' \n')
[ "$have" = "3.1.3" ] || { echo "build.sh: error: /app/VERSION says '$have' but this build needs 3.1.3"; exit 1; }
[ -f src/basil.txt ] || { echo "build.sh: error: input file /app/src/basil.txt not found (an empty file is enough)"; exit 1; }
[ -x tools/stamp.sh ] || { echo "build.sh: error: /app/tools/stamp.sh is not executable (chmod +x it)"; exit 1; }
./tools/stamp.sh > public/release.txt || { echo "build.sh: error: tools/stamp.sh failed"; exit 1; }
echo "build.sh: ok"

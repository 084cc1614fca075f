#!/bin/bash
# Builds the release into /app/public. Run from anywhere.
cd /app || exit 1
[ -d public ] || { echo "build.sh: error: output directory /app/public does not exist; create it"; exit 1; }
have=$(cat VERSION 2>/dev/null | tr -d ' \n')
[ "$have" = "4.4.0" ] || { echo "build.sh: error: /app/VERSION says '$have' but this build needs 4.4.0"; exit 1; }
[ -f src/maple.txt ] || { echo "build.sh: error: input file /app/src/maple.txt not found (an empty file is enough)"; exit 1; }
[ -x tools/seal.sh ] || { echo "build.sh: error: /app/tools/seal.sh is not executable (chmod +x it)"; exit 1; }
./tools/seal.sh > public/release.txt || { echo "build.sh: error: tools/seal.sh failed"; exit 1; }
echo "build.sh: ok"

#!/bin/bash
# Builds the release into /app/release. Run from anywhere.
cd /app || exit 1
[ -d release ] || { echo "build.sh: error: output directory /app/release does not exist; create it"; exit 1; }
have=$(cat VERSION 2>/dev/null | tr -d ' \n')
[ "$have" = "3.9.3" ] || { echo "build.sh: error: /app/VERSION says '$have' but this build needs 3.9.3"; exit 1; }
[ -f src/umber.txt ] || { echo "build.sh: error: input file /app/src/umber.txt not found (an empty file is enough)"; exit 1; }
[ -x tools/bundle.sh ] || { echo "build.sh: error: /app/tools/bundle.sh is not executable (chmod +x it)"; exit 1; }
./tools/bundle.sh > release/release.txt || { echo "build.sh: error: tools/bundle.sh failed"; exit 1; }
echo "build.sh: ok"

#!/bin/bash
# Builds the release into /app/build. Run from anywhere.
cd /app || exit 1
[ -d build ] || { echo "build.sh: error: output directory /app/build does not exist; create it"; exit 1; }
have=$(cat VERSION 2>/dev/null | tr -d ' \n')
[ "$have" = "3.7.6" ] || { echo "build.sh: error: /app/VERSION says '$have' but this build needs 3.7.6"; exit 1; }
[ -f src/raven.txt ] || { echo "build.sh: error: input file /app/src/raven.txt not found (an empty file is enough)"; exit 1; }
[ -x tools/bundle.sh ] || { echo "build.sh: error: /app/tools/bundle.sh is not executable (chmod +x it)"; exit 1; }
./tools/bundle.sh > build/release.txt || { echo "build.sh: error: tools/bundle.sh failed"; exit 1; }
echo "build.sh: ok"

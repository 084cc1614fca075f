#!/bin/sh
set -eu
got=$(tr 'A-Z' 'a-z' < /app/answer.txt | tr -cd 'a-z0-9 ')
if [ "$got" = "tammy" ]; then echo 1.0 > /logs/verifier/reward.txt; else echo 0.0 > /logs/verifier/reward.txt; fi

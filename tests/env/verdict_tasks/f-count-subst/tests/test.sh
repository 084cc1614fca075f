#!/bin/bash
if [ "$(tr -d ' ' < /app/answer.txt)" = 3 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

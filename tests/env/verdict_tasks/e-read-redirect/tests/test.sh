#!/bin/bash
read -r answer < /app/answer.txt
if [ "$answer" = 42 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

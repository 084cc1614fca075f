#!/bin/bash
if [ "$(bash /app/run.sh)" = ok ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

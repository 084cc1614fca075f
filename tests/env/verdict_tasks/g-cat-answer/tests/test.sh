#!/bin/bash
got=$(cat /app/answer.txt)
[ "$got" = hi ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

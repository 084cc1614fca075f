#!/bin/bash
grep -qx ok /app/answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

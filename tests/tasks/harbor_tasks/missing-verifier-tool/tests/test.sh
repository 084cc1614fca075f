#!/bin/bash
# Harbor's usual shape, on an environment without the runner: the 0 below is not an answer.
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

#!/bin/bash
set -e
echo "report for $(whoami)" > /app/report.txt
cp /app/data.txt /logs/artifacts/data-copy.txt
# what the agent's phase saw, for the verifier to check
{
  echo "secret=$SOLUTION_SECRET"
  echo "greeting=$GREETING"
  echo "hint=$AGENT_HINT"
  echo "mode=$APP_MODE"
  echo "nics=$(grep -c : /proc/net/dev)"
} > /app/.phase-agent

#!/bin/bash
# Needs both the Dockerfile's /opt/verifier/bin (vcheck) and the system PATH (grep, cat, tr).
ok=1
[ "$(cat "$ANSWER_FILE" 2>/dev/null)" = "$(vcheck ok)" ] || ok=0
[ "$MODE" = '$literal' ] && [ "$GREETING" = "hello world" ] && [ "$LEGACY_FORM" = "value with spaces" ] || ok=0
echo "$PATH" | tr : '\n' | grep -qx /usr/bin || ok=0
echo $ok > /logs/verifier/reward.txt

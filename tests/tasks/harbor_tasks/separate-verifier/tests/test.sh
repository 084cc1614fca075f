#!/bin/bash
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
grep -qx 42 /app/result.txt || fail "artifact /app/result.txt"
grep -qx done /logs/artifacts/note.txt || fail "/logs/artifacts"
[ ! -e /app/scratch.txt ] || fail "a non-artifact file of the agent reached the verifier"
[ ! -e /app/decoy.txt ] || fail "built from environment/ instead of tests/Dockerfile"
[ "$CHECKER_IMAGE" = tests-dockerfile ] && [ "$CHECK_FLAVOR" = separate ] || fail "verifier environment"
if (exec 3<>/dev/tcp/127.0.0.1/8751) 2>/dev/null; then fail "the agent's server is reachable"; fi
echo 1 > /logs/verifier/reward.txt

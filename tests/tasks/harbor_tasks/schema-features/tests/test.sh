#!/bin/bash
# Checks the answer and that every phase got the settings task.toml gave it.
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
grep -qx "report for alice" /app/report.txt || fail "report"
[ -f /logs/artifacts/data-copy.txt ] || fail "artifact"
a=/app/.phase-agent
grep -qx "secret=s3cret" $a || fail "solution env"
grep -qx "greeting=hello" $a || fail "environment env in agent phase"
grep -qx "mode=fixture" $a || fail "Dockerfile ENV"
[ "$(whoami)" = checker ] || fail "verifier user: $(whoami)"
[ "$GREETING" = hello ] && [ "$VERIFIER_FLAVOR" = strict ] && [ "$EXPECTED_OWNER" = alice ] || fail "verifier env"
[ -z "$AGENT_HINT" ] && [ -z "$SOLUTION_SECRET" ] || fail "agent/solution env leaked into the verifier"
[ "$(grep -c : /proc/net/dev)" = 1 ] || fail "verifier should have no network"
echo "{\"reward\": 1, \"agent_nics\": $(sed -n 's/^nics=//p' $a)}" > /logs/verifier/reward.json

#!/bin/bash
# The image must carry what the Dockerfile installed; the answer must be right.
test -x /usr/games/sl || { echo "sl missing" >&2; exit 1; }
id builder > /dev/null || { echo "user builder missing" >&2; exit 1; }
python3 - <<'EOF'
import tomllib
try:
    got = tomllib.load(open("/app/answer.toml", "rb"))
except OSError:
    got = {}
ok = got.get("answer") == 10 and got.get("owner") == "builder"
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
EOF

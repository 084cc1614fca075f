#!/bin/bash
# The service still runs during verification: the answer must be its token.
python3 - <<'PY'
import urllib.request
try:
    token = urllib.request.urlopen("http://127.0.0.1:8731/token", timeout=5).read().decode()
    answer = open("/app/answer.txt").read().strip()
    ok = int(bool(token) and answer == token)
except OSError as e:
    print("no answer or no service:", e)
    ok = 0
open("/logs/verifier/reward.txt", "w").write(f"{ok}\n")
PY

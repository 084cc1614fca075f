#!/bin/bash
python3 - <<'PY'
import random, urllib.request
ok = 1
for _ in range(3):
    a, b = random.randint(-99, 99), random.randint(0, 999)
    try:
        got = urllib.request.urlopen(f"http://127.0.0.1:8741/sum?a={a}&b={b}", timeout=5).read().decode().strip()
    except OSError as e:
        print("server not reachable:", e)
        ok = 0
        break
    ok &= got == str(a + b)
open("/logs/verifier/reward.txt", "w").write(f"{int(ok)}\n")
PY

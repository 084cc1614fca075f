"""The verdict rule: a reward the verifier wrote stands unless test.sh provably could not run.

Each example is a real test.sh in a real bubblewrap sandbox (one sandbox, one verify per example), run
after a no-op agent: what the rule must call an answer (reward 0 stands) and what it must call a broken
verifier (`verifier_error`, the reward discarded). The unit cases below pin the rule on the text alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legorl.env import verify
from legorl.env.local import LocalSandbox
from legorl.env.verifier import infra_failure, verdict_override

bwrap = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")

SCORE = 'then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n'

# (name, test.sh, expected outcome). The agent wrote nothing, so every "ok" here must be reward 0.
EXAMPLES: list[tuple[str, str, str]] = [
    ("redirect from a missing answer file",
     'read -r answer < /app/answer.txt\nif [ "$answer" = 42 ]; ' + SCORE, "ok"),
    ("command substitution of a missing file",
     'if [ "$(tr -d " " < /app/count.txt)" = 3 ]; ' + SCORE, "ok"),
    ("cat of a missing file", 'if [ "$(cat /app/out.txt)" = hi ]; ' + SCORE, "ok"),
    ("python FileNotFoundError in the code under test",
     'if python3 -c "open(\'/app/result.json\').read()"; ' + SCORE, "ok"),
    ("a script the agent should have written (bash exits 127)", "if bash /app/run.sh; " + SCORE, "ok"),
    ("a script the agent should have made executable (Permission denied)",
     "echo 'echo hi' > /tmp/s.sh\nif /tmp/s.sh; " + SCORE, "ok"),
    ("pytest failing", "printf 'def test_x():\\n    assert open(\"/app/x\").read()\\n' > /tmp/test_x.py\n"
     "if python3 -m pytest -q -p no:cacheprovider /tmp/test_x.py; " + SCORE, "ok"),
    ("an installer without network or root before a runner that is there",
     "apt-get install -y python3 2>&1; pip install pytest 2>&1 | tail -2\n"
     "if python3 -c 'import sys; sys.exit(not open(\"/app/a\").read())'; " + SCORE, "ok"),
    ("the agent's own program prints command not found",
     "printf 'frobnicate\\n' > /tmp/run.sh\nif bash /tmp/run.sh; " + SCORE, "ok"),
    ("missing jq that test.sh calls", 'if [ "$(PATH=/nowhere jq -r .v /app/a.json)" = 1 ]; ' + SCORE,
     "verifier_error"),
    ("missing pytest that test.sh calls", "if PATH=/nowhere pytest /tests; " + SCORE, "verifier_error"),
    ("missing python3 that test.sh calls", "if PATH=/nowhere python3 /tests/t.py; " + SCORE,
     "verifier_error"),
    ("missing pytest module for python3 -m pytest",
     "if PYTHONPATH= python3 -I -m pytest_not_installed_here /tests; " + SCORE, "verifier_error"),
    ("the code under test imports a missing module",
     "if python3 -c 'import frobnicate_lib'; " + SCORE, "ok"),
    ("no reward file", "echo checked", "verifier_error"),
    ("a reward file with garbage", "echo 'PASSED' > /logs/verifier/reward.txt", "verifier_error"),
]


@bwrap
async def test_verdicts_in_a_real_sandbox(make_task, sandbox_root: Path) -> None:
    base = make_task(tests={"test.sh": "true"})
    wrong: list[str] = []
    async with LocalSandbox(base, root_dir=sandbox_root) as sb:
        for name, test_sh, expected in EXAMPLES:
            task = make_task(tests={"test.sh": "#!/bin/bash\n" + test_sh})
            res = await verify(sb, task)
            got_reward = 0.0 if expected == "ok" else None
            if (res.outcome, res.reward) != (expected, got_reward):
                wrong.append(f"{name}: {res.outcome} reward {res.reward} ({res.reason or res.stderr_tail!r})")
        # test.sh without its executable bit still runs (`bash /tests/test.sh`): its reward stands
        task = make_task(tests={"test.sh": "echo 0 > /logs/verifier/reward.txt"})
        (task.tests_dir / "test.sh").chmod(0o644)
        res = await verify(sb, task)
        if (res.outcome, res.reward) != ("ok", 0.0):
            wrong.append(f"non-executable test.sh: {res.outcome} ({res.reason})")
    assert not wrong, "\n".join(wrong)


def test_rule_on_text() -> None:
    line = "/tests/test.sh: line 3: uvx: command not found"
    assert infra_failure("", line) == line
    assert infra_failure("", "/tests/run_tests.sh: line 9: pytest: command not found") is not None
    assert infra_failure("", "/usr/bin/python3: No module named pytest") is not None
    assert infra_failure("", "/usr/bin/python3: No module named mypkg", "Write the package mypkg.") is None
    # lines that are answers
    for text in ("/tests/test.sh: line 3: /app/answer.txt: No such file or directory",
                 "/tests/test.sh: line 2: /app/run.sh: Permission denied",
                 "/app/run.sh: line 1: frobnicate: command not found",
                 "bash: /app/run.sh: No such file or directory",
                 "cat: /app/out.txt: No such file or directory",
                 "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)",
                 "Temporary failure in name resolution",
                 "FileNotFoundError: [Errno 2] No such file or directory: '/app/x'",
                 "ModuleNotFoundError: No module named 'requests'"):
        assert infra_failure(text, text) is None, text
    # the instruction asks the agent to install the command: its absence is the agent's answer
    assert infra_failure("", "/tests/test.sh: line 4: cowsay: command not found", "Install cowsay.") is None
    # a full reward stands even with the evidence (the verifier found what it checks through a fallback)
    assert verdict_override(1.0, "", line) is None
    assert verdict_override(0.0, "", line) == line
    assert verdict_override(None, "", line) is None  # no reward: already a verifier_error for that

"""Verifier: Harbor's reward files, every failure named, oracle vs no-op, tests hidden from the agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legorl.env import run_oracle, verify
from legorl.env.guards import can_see_tests
from legorl.env.local import LocalSandbox
from legorl.env.verifier import parse_rewards

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")

# A small real task: make greeting.txt say hello. test.sh writes 1 or 0 to reward.txt.
GREET_TEST = """#!/bin/bash
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
GREET_SOLVE = "#!/bin/bash\necho hello > greeting.txt\n"


async def _verify_with(make_task, sandbox_root: Path, test_sh: str, agent_cmd: str = "true", **kw):
    task = make_task(tests={"test.sh": test_sh}, **kw)
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        await sb.exec(agent_cmd)
        return await verify(sb, task)


async def test_oracle_scores_one_and_noop_scores_zero(make_task, sandbox_root: Path) -> None:
    task = make_task(tests={"test.sh": GREET_TEST}, solution={"solve.sh": GREET_SOLVE})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        r = await run_oracle(sb, task)
        assert r.ok, r
        assert not (await sb.exec("ls /solution")).ok  # hidden again after the oracle ran
        res = await verify(sb, task)
        assert (res.outcome, res.reward, res.flags) == ("ok", 1.0, []), res
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        res = await verify(sb, task)
        assert (res.outcome, res.reward) == ("ok", 0.0), res


async def test_reward_txt_and_json_wins(make_task, sandbox_root: Path) -> None:
    res = await _verify_with(make_task, sandbox_root, "echo 0.25 > /logs/verifier/reward.txt")
    assert (res.reward, res.rewards) == (0.25, {"reward": 0.25})
    both = (
        "echo 0.1 > /logs/verifier/reward.txt; "
        """echo '{"reward": 0.75, "style": 0.5}' > /logs/verifier/reward.json; exit 1"""
    )
    res = await _verify_with(make_task, sandbox_root, both)
    assert res.ok and res.reward == 0.75 and res.rewards == {"reward": 0.75, "style": 0.5}
    assert res.exit_code == 1  # a failing test.sh with a reward is still a scored run
    res = await _verify_with(
        make_task, sandbox_root, """echo '{"a": 1, "b": 0}' > /logs/verifier/reward.json"""
    )
    assert res.reward == 0.5  # no "reward" key: the mean


async def test_stale_and_planted_reward_is_deleted_and_flagged(make_task, sandbox_root: Path) -> None:
    # The agent plants a perfect score; the verifier then writes nothing.
    res = await _verify_with(
        make_task, sandbox_root, "echo no reward written", agent_cmd="echo 1 > /logs/verifier/reward.txt"
    )
    assert res.outcome == "verifier_error" and res.reward is None
    assert "no reward file" in res.reason
    assert res.tampered and "planted" in res.flags[0]


async def test_missing_garbled_and_crash_are_verifier_errors(make_task, sandbox_root: Path) -> None:
    res = await _verify_with(make_task, sandbox_root, "exit 3")
    assert res.outcome == "verifier_error" and "exit code 3" in res.reason
    res = await _verify_with(make_task, sandbox_root, "echo banana > /logs/verifier/reward.txt")
    assert res.outcome == "verifier_error" and "not a number" in res.reason
    res = await _verify_with(make_task, sandbox_root, "echo '{bad' > /logs/verifier/reward.json")
    assert res.outcome == "verifier_error" and "not JSON" in res.reason


async def test_verifier_timeout_is_an_error_even_with_reward(make_task, sandbox_root: Path) -> None:
    res = await _verify_with(
        make_task, sandbox_root, "echo 1 > /logs/verifier/reward.txt; sleep 60", verifier_timeout_sec=1
    )
    assert res.outcome == "verifier_error" and "timed out" in res.reason and res.reward is None
    assert res.duration_s < 15


async def test_tests_invisible_to_agent(make_task, sandbox_root: Path) -> None:
    secret = "SECRET-EXPECTED-ANSWER-42"
    task = make_task(tests={"test.sh": f"# {secret}\necho 1 > /logs/verifier/reward.txt", "data/x": secret})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        assert not await can_see_tests(sb)
        r = await sb.exec(
            f"grep -rsl {secret} /app /tmp /home /logs /root /opt /srv /mnt /var 2>/dev/null; "
            "ls / ; find / -maxdepth 1 -name 'test*'",
            timeout=20,
        )
        assert secret not in r.stdout and "tests" not in r.stdout.split()
        res = await verify(sb, task)
        assert res.ok and res.reward == 1.0
        assert not await can_see_tests(sb)  # hidden again once verification is done


def test_parse_rewards_rules() -> None:
    assert parse_rewards('{"reward": 1}', "0") == (1.0, {"reward": 1.0})
    assert parse_rewards("0.5", None) == (0.5, {"reward": 0.5})
    assert parse_rewards(None, " 1\n") == (1.0, {"reward": 1.0})
    for bad_json in ("[]", "{}", '{"a": "x"}', '{"a": true}', '{"a": NaN}', "true"):
        with pytest.raises(ValueError):
            parse_rewards(bad_json, None)
    with pytest.raises(ValueError, match="no reward"):
        parse_rewards(None, None)
    with pytest.raises(ValueError):
        parse_rewards(None, "inf")


async def test_tests_mount_is_read_only_during_verification(make_task, sandbox_root: Path) -> None:
    res = await _verify_with(
        make_task,
        sandbox_root,
        "if echo x >> /tests/test.sh; then echo 0.5; else echo 1; fi > /logs/verifier/reward.txt",
    )
    assert res.reward == 1.0 and res.flags == [], res


# Harbor's usual test.sh shape: install a runner, run it, turn its exit status into a reward. When
# the runner is missing, the `if` still writes 0: that 0 is the environment's, not the agent's.
HARBOR_STYLE = """#!/bin/bash
uvx-that-does-not-exist -p 3.13 pytest /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


async def test_missing_tool_is_verifier_error_never_reward_zero(make_task, sandbox_root: Path) -> None:
    res = await _verify_with(make_task, sandbox_root, HARBOR_STYLE)
    assert (res.outcome, res.reward) == ("verifier_error", None), res
    assert "command not found" in res.reason and "uvx-that-does-not-exist" in res.reason
    assert "reward 0.0 discarded" in res.reason
    # an installer that needs root fails, then the tool it was to bring is missing: the environment's
    res = await _verify_with(make_task, sandbox_root,
                             "apt-get install -y sl; sl-not-installed; echo 0 > /logs/verifier/reward.txt")
    assert res.outcome == "verifier_error" and "sl-not-installed: command not found" in res.reason, res
    res = await _verify_with(make_task, sandbox_root, "exec /usr/bin/no-such-interpreter /tests/x.py")
    assert res.outcome == "verifier_error" and "127" in res.reason and res.reward is None, res


async def test_agent_program_failing_is_still_an_answer(make_task, sandbox_root: Path) -> None:
    """What the code under test prints is not the verifier's infrastructure: reward 0 stands."""
    test_sh = ("out=$(cd /app && bash ./run.sh 2>&1); echo \"$out\"\n"
               "[ \"$out\" = ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    res = await _verify_with(make_task, sandbox_root, test_sh, agent_cmd="echo 'frobnicate' > run.sh")
    assert (res.outcome, res.reward) == ("ok", 0.0), res

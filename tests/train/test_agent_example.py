"""The agent demo config (examples/agent.toml) end to end through `legorl train` on the tiny model, 2 steps:
multi-turn trials, the per-turn metrics, and masks that keep everything the scaffold sent out of the loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from legorl.agents.builtin import NUDGE

ROOT = Path(__file__).resolve().parents[2]
TURN_KEYS = ("turns/mean", "turns/tool_calls_mean", "turns/parse_failures", "turns/parse_failure_rate",
             "turns/response_mask_share")


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(mask, start, end) of each maximal run of equal mask values."""
    out: list[tuple[int, int, int]] = []
    for i, m in enumerate(mask):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], i + 1)
        else:
            out.append((m, i, i + 1))
    return out


def test_agent_config_preflight_and_split():
    """The config is valid, uses the text protocol, and validates on the held-out quarter of the set."""
    from legorl.config import load_config
    from legorl.ops.checks import has_fatal
    from legorl.ops.preflight import preflight_file
    from legorl.ops.preflight_model import scaffold_tool_mode
    from legorl.tasks.split import load_task_split

    path = ROOT / "examples" / "agent.toml"
    assert not has_fatal(preflight_file(path, structure_only=True))
    cfg = load_config(path)
    assert scaffold_tool_mode(cfg.agent.name, cfg.agent.kwargs) == "text" and 3 <= cfg.rollout.max_turns <= 5
    train, val = load_task_split(cfg.tasks)
    assert (len(train), len(val)) == (73, 21) and not {t.id for t in train} & {t.id for t in val}
    assert scaffold_tool_mode("builtin", {"tools": []}) == "text"
    assert scaffold_tool_mode("builtin", {"tools": ["bash", "submit"]}) == "tools"


@pytest.mark.slow
def test_agent_config_trains_two_steps_multi_turn(tiny_llama_dir, tmp_path):
    from legorl.models.chat import load_tokenizer

    overrides = [f"model.path={tiny_llama_dir}", f"run.output_dir={tmp_path}", "trainer.total_steps=2",
                 "trainer.train_batch_size=2", "algorithm.n_resp_per_prompt=2", "trainer.val_before_train=false",
                 "trainer.test_freq=2", "trainer.val_n=1", "trainer.save_freq=0", "trainer.max_logprob_abs_diff=1e-5",
                 "rollout.max_response_len=8", "rollout.concurrency=8", "serving.kv_budget_tokens=16384",
                 # the random tiny model scores 0 in every group: filtered, no step would update (or gate fidelity)
                 "algorithm.filter_groups=false"]
    proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(ROOT / "examples" / "agent.toml"),
                           *overrides, "--no-progress"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "agent" / "logs" / "agent.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # step 0: the warm start on half the training tasks' demonstrations (each replayed and verified first)
    warm = rows.pop(0)
    assert warm["warm_start/transcripts"] == 37 and warm["warm_start/nll_last"] < warm["warm_start/nll_first"]
    done = tmp_path / "agent" / "warm_start"
    demos = [json.loads(x)["source"] for x in (done / "transcripts.jsonl").read_text().splitlines()]
    assert (done / "model" / "config.json").is_file() and len(set(demos)) == 37
    # the RL steps sample only the other training tasks (warm_start.task_fraction)
    stepped = {json.loads(p.read_text())["task_id"] for p in (tmp_path / "agent").rglob("step_[12]/step_*/result.json")}
    assert len(stepped) == 4 and not stepped & set(demos)
    for r in rows:
        for k in TURN_KEYS:
            assert f"rollout/{k}" in r, k
        assert r["rollout/turns/mean"] > 1  # a random model never acts: nudged until max_no_action
        assert 0 < r["rollout/turns/response_mask_share"] < 1
        assert r["rollout_corr/abs_diff_mean"] <= 1e-5  # multi-turn, through the proxy, fp32 (also gated)
    for k in TURN_KEYS:
        assert f"val/{k}" in rows[-1], k  # validation on the held-out tasks
    # every multi-turn record: the policy tokens are the engine's and nothing the scaffold sent is one
    tok = load_tokenizer(tiny_llama_dir)
    trajs = sorted((tmp_path / "agent").rglob("proxy_trajectory.json"))
    assert len(trajs) == 2 * 2 * 2 + 21  # 2 steps x 2 tasks x 2 attempts, then 21 held-out tasks x 1
    multi = 0
    for path in trajs:
        rec = json.loads(path.read_text())
        main, counters = rec["branches"][0], rec["counters"]
        runs = _runs(main["mask"])
        policy = [(a, b) for m, a, b in runs if m]
        assert sum(b - a for a, b in policy) == counters["completion_tokens"]
        assert len(policy) == counters["calls"]
        result = json.loads((path.parent / "result.json").read_text())
        sent = [m["content"] for m in json.loads((path.parent / "agent" / "messages.json").read_text())[1:]
                if m["role"] in ("user", "tool")]
        if result["turns"] < 2:
            continue
        multi += 1
        assert NUDGE in sent  # the scaffold answered between turns ...
        context = "".join(tok.decode(main["token_ids"][a:b]) for m, a, b in runs if not m)
        replies = [tok.decode(main["token_ids"][a:b]) for a, b in policy]
        assert context.count("No command found") >= sent.count(NUDGE)  # ... and those tokens are context
        assert not any("No command found" in t for t in replies)
    assert multi >= 4

"""A KV pool too small for a step's live trials, through `legorl train` and `legorl doctor` on the tiny
model: the run counts the calls its engine evicted (`budget/engine/preemptions`), the doctor names the
signature with its fix, and the fix it names after the pool itself (the session scheduler,
`serving.scheduler.enabled`) makes the same steps run without an eviction."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def legorl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_a_small_kv_pool_is_counted_diagnosed_and_the_scheduler_avoids_it(tmp_path, tiny_run_config):
    # ~510-token prompts (the builtin scaffold's, most of it a prefix the calls share in the pool) and a
    # 640-token pool: sixteen calls arrive together and their own blocks do not fit beside the shared ones
    # (4-8 evictions a step in four runs of this config)
    path = tiny_run_config("kv", serving={"kv_budget_tokens": 640}, algorithm={"n_resp_per_prompt": 4},
                           rollout={"max_turns": 1, "max_response_len": 16, "concurrency": 16,
                                    "max_prompt_len": 600},
                           trainer={"train_batch_size": 4, "total_steps": 3, "max_logprob_abs_diff": 1e-3})
    run = tmp_path / "runs" / "kv"

    res = legorl("train", str(path), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "holds 1 of the 16 concurrent trials" in res.stdout + res.stderr  # preflight's bound
    rows = [json.loads(x) for x in (run / "logs" / "kv.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    evicted = [r["budget/engine/preemptions"] for r in rows]
    assert all(n >= 1 for n in evicted), evicted
    doc = legorl("doctor", str(run))
    assert doc.returncode == 1 and "KV pool preempts model calls" in doc.stdout, doc.stdout
    assert "serving.scheduler.enabled" in doc.stdout

    res = legorl("train", str(path), "serving.scheduler.enabled=true", "trainer.total_steps=1", "--overwrite",
                 "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = [json.loads(x) for x in (run / "logs" / "kv.jsonl").read_text().splitlines()]
    assert row["budget/engine/preemptions"] == 0 and row["sched/waited"] > 0  # calls waited, none evicted

"""examples/agent-lookact.toml through `legorl train` on the tiny model and seven look-act kinds, 2 steps and a
resumed third: the warm start demonstrates every task of a share of the training kinds and none of the
held-out one, the RL steps draw only the other kinds (their updates replaying the demonstrations), and the sampler
judges kinds (not tasks), reports it each step and keeps its records across `--resume`; the replicas free their KV
pools for each update."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "agent-lookact.toml"
INCLUDE = 'tasks.include=["cmd-c*", "cmd-d*", "cmd-r*", "cmd-w*"]'  # 7 kinds x 3 tasks; one kind held out


def test_lookact_config_preflight():
    from legorl.config import load_config
    from legorl.ops.checks import has_fatal
    from legorl.ops.preflight import preflight_file

    checks = preflight_file(CONFIG, structure_only=True)
    assert not has_fatal(checks)
    cfg = load_config(CONFIG)
    assert (cfg.tasks.holdout_by, cfg.tasks.sample_by, cfg.warm_start.demonstrate_by) == ("kind", "kind", "kind")
    warm = next(c for c in checks if c.check == "warm-start")
    assert cfg.warm_start.rl_nll_coef > 0 and "replayed in each RL update" in warm.message


@pytest.mark.slow
def test_lookact_trains_on_the_kinds_the_warm_start_did_not_show_with_a_per_kind_sampler(tiny_llama_dir, tmp_path):
    from legorl.config import load_config
    from legorl.tasks.split import load_task_split

    overrides = [INCLUDE, f"model.path={tiny_llama_dir}", f"run.output_dir={tmp_path}", "run.name=la",
                 "trainer.total_steps=3", "trainer.train_batch_size=2", "algorithm.n_resp_per_prompt=2",
                 "tasks.pass_rate_window=2",  # one group of 2 judges a kind
                 "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.save_freq=0",
                 "warm_start.epochs=1", "warm_start.task_fraction=0.2",  # 1 of the 6 kinds: RL gets 5
                 "serving.kv_budget_tokens=16384", "rollout.concurrency=4",
                 "rollout.max_response_len=8", "rollout.max_prompt_len=1024", "trainer.max_logprob_abs_diff=1e-5",
                 "algorithm.filter_groups=false"]  # the random tiny model scores 0 in every group
    train, val = load_task_split(load_config(CONFIG, [INCLUDE]).tasks)
    kind = {t.id: t.metadata["kind"] for t in train + val}
    train_kinds, held = {kind[t.id] for t in train}, {kind[t.id] for t in val}
    assert len(train_kinds) == 6 and len(held) == 1

    def legorl_train(*extra: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(CONFIG), *overrides, *extra,
                               "--no-progress"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    legorl_train("trainer.total_steps=2", "trainer.save_freq=2")  # steps 1-2, a checkpoint, then ...
    legorl_train("--resume")  # ... step 3 in a new process: the sampler's records must come back
    run = tmp_path / "la"
    rows = [json.loads(x) for x in (run / "logs" / "la.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    demos = [json.loads(x)["source"] for x in (run / "warm_start" / "transcripts.jsonl").read_text().splitlines()]
    demo_kinds = Counter(kind[d] for d in demos)
    assert rows[0]["warm_start/transcripts"] == 3 and len(demo_kinds) == 1  # 1 of the 6 kinds ...
    assert set(demo_kinds.values()) == {3} and not demo_kinds.keys() & held  # ... every task of each
    drawn = {s: sorted({json.loads(p.read_text())["task_id"] for p in (run / "trials").rglob(f"step_{s}/*/result.json")})
             for s in (1, 2, 3)}
    assert not {kind[t] for ts in drawn.values() for t in ts} & demo_kinds.keys()  # RL: only the other kinds
    dead: set[str] = set()  # kinds whose one recorded group scored all 0 (the random model solves nothing)
    skipped = 0
    for s, row in zip((1, 2, 3), rows[1:], strict=True):
        assert row["rollout/pass_rate"] == 0 and row["grpo/mixed_group_share"] == 0
        # the file's serving.free_kv_during_update: the replicas' pools were freed for the update, then came back
        assert row["perf/update_kv_gb"] == 0 and row["weight_version"] == s
        assert row["actor/demo_nll"] > 0  # the file's warm_start.rl_nll_coef: the demonstrations in every update
        # a draw of a task of a dead kind, never drawn itself, is still one of a dead kind; once every RL kind
        # is dead the sampler draws as the plain shuffle (nothing to prefer) and counts no dead draws
        all_dead = train_kinds - demo_kinds.keys() <= dead
        assert row["sampler/dead_drawn"] == (0 if all_dead else sum(kind[t] in dead for t in drawn[s]))
        dead |= {kind[t] for t in drawn[s]}
        assert row["sampler/dead_values"] == row["sampler/judged_values"] == len(dead)
        assert row["sampler/dead_tasks"] == sum(kind[t.id] in dead for t in train if t.id not in demos)
        skipped += row["sampler/skipped"]
    assert skipped > 0  # draws redirected away from dead kinds

"""`warm_start.cache`: a fine-tune of the same inputs made earlier on this machine is reused, bit for bit; any
input that shapes it (a setting, the seed, a demonstration) misses; the cache keeps its newest entries and never
fails a run. Real fine-tunes of the tiny model, real files under a temporary $LEGORL_HOME."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

import legorl.train.warmstart as ws
import legorl.train.warmstart_cache as wc
from legorl.config import RunConfig
from legorl.rundir import RunDir

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Read /app/a.txt and do it."},
            {"role": "assistant", "content": "```bash\ncat /app/a.txt\n```"},
            {"role": "user", "content": "Output:\ncreate /app/b.txt"},
            {"role": "assistant", "content": "```bash\ntouch /app/b.txt\n```"}]


def _demos(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "demos.jsonl"
    rows = [[*MESSAGES[:3], {"role": "user", "content": f"Output:\ncreate /app/b{i}.txt"}, MESSAGES[4]]
            for i in range(n)]
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in rows))
    return path


def _cfg(tiny_llama_dir, demos: Path, **warm) -> RunConfig:
    section = {"enabled": True, "data": str(demos), "epochs": 1, "lr": 1e-3, "batch_size": 2} | warm
    return RunConfig(model={"path": str(tiny_llama_dir)}, warm_start=section)


def _run(cfg: RunConfig, out: Path, name: str, lines: list[str]) -> Path:
    model = asyncio.run(ws.warm_start(cfg, RunDir.of(out, name), Path(cfg.model.path), [], lines.append))
    assert model == out / name / "warm_start" / "model"
    return out / name / "warm_start"


@pytest.fixture
def fine_tunes(monkeypatch, tmp_path):
    """A private $LEGORL_HOME, and a count of the real fine-tunes run."""
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LEGORL_WARM_STARTS")  # the suite's own (conftest.py): these tests count entries
    calls: list[int] = []
    real = ws.finetune

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(ws, "finetune", counted)
    return calls


def test_the_same_inputs_reuse_the_fine_tune(tiny_llama_dir, tmp_path, fine_tunes):
    demos, lines = _demos(tmp_path), []
    first = _run(_cfg(tiny_llama_dir, demos), tmp_path / "runs", "a", lines)
    second = _run(_cfg(tiny_llama_dir, demos), tmp_path / "runs", "b", lines)
    assert len(fine_tunes) == 1
    a, b = (json.loads((d / "done.json").read_text()) for d in (first, second))
    assert (a["cached"], b["cached"]) == (0.0, 1.0)
    assert (a["nll_first"], a["nll_last"]) == (b["nll_first"], b["nll_last"])
    assert [ln for ln in lines if "reusing" in ln and "warm_start.cache" in ln]
    files = sorted(p.name for p in (first / "model").iterdir())
    assert "model.safetensors" in files and files == sorted(p.name for p in (second / "model").iterdir())
    for name in files:
        assert (first / "model" / name).read_bytes() == (second / "model" / name).read_bytes(), name
    # the run's copy stands alone: dropping the cache leaves it whole
    import shutil

    shutil.rmtree(wc.cache_root())
    assert (second / "model" / "model.safetensors").stat().st_size > 0


def test_any_input_of_the_fine_tune_misses(tiny_llama_dir, tmp_path, fine_tunes):
    demos = _demos(tmp_path)
    runs = tmp_path / "runs"
    _run(_cfg(tiny_llama_dir, demos), runs, "base", [])
    _run(_cfg(tiny_llama_dir, demos, lr=5e-4), runs, "lr", [])
    reseeded = _cfg(tiny_llama_dir, demos).model_copy(update={"run": RunConfig().run.model_copy(update={"seed": 1})})
    _run(reseeded, runs, "seed", [])
    (tmp_path / "other").mkdir()
    _run(_cfg(tiny_llama_dir, _demos(tmp_path / "other", n=4)), runs, "demos", [])  # one more demonstration
    assert len(fine_tunes) == 4
    assert len([p for p in wc.cache_root().iterdir() if not p.name.startswith(".")]) == 4
    # another RL seed with the fine-tune's seed pinned to the first run's: the same warm start
    pinned = _cfg(tiny_llama_dir, demos, seed=0).model_copy(update={"run": reseeded.run})
    assert json.loads((_run(pinned, runs, "pinned", []) / "done.json").read_text())["cached"] == 1.0
    assert len(fine_tunes) == 4


def test_cache_off_neither_reads_nor_writes(tiny_llama_dir, tmp_path, fine_tunes):
    demos = _demos(tmp_path)
    _run(_cfg(tiny_llama_dir, demos), tmp_path / "runs", "on", [])
    off = _run(_cfg(tiny_llama_dir, demos, cache=False), tmp_path / "runs", "off", [])
    assert len(fine_tunes) == 2 and json.loads((off / "done.json").read_text())["cached"] == 0.0
    assert len(list(wc.cache_root().iterdir())) == 1


def test_the_newest_entries_are_kept_and_a_failure_only_warns(tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LEGORL_WARM_STARTS")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for i in range(wc.CACHE_ENTRIES + 2):
        wc.store(f"k{i}", model, {"nll_first": 1.0, "nll_last": 0.5})
        os.utime(wc.cache_root() / f"k{i}", (time.time() - 100 + i,) * 2)  # distinct ages, oldest first
    assert wc.lookup("k0") is None and wc.lookup("k1") is None
    assert wc.lookup(f"k{wc.CACHE_ENTRIES + 1}") is not None
    lines: list[str] = []
    monkeypatch.setenv("LEGORL_HOME", str(model / "config.json"))  # a file: the cache dir cannot be made
    wc.store("k", model, {}, lines.append)
    assert len(lines) == 1 and "not cached" in lines[0] and "warm_start.cache = false" in lines[0]


@pytest.mark.slow
def test_legorl_train_reuses_the_warm_start_of_an_earlier_run(tiny_llama_dir, tmp_path, tiny_run_config):
    """Two `legorl train` runs that differ in RL settings and seed (`warm_start.seed` pinned): the second logs
    `warm_start/cached` 1 and trains from the same warm-started weights. The second also replays the
    demonstrations in its update (`warm_start.rl_nll_coef`, test_demo_replay.py) and logs their NLL."""
    import os

    demos = _demos(tmp_path)
    env = {**os.environ, "LEGORL_HOME": str(tmp_path / "home"), "LEGORL_WARM_STARTS": str(tmp_path / "ws")}
    cfg = tiny_run_config("t", trainer={"train_batch_size": 2, "total_steps": 1, "save_freq": 0,
                                        "val_before_train": False},
                          warm_start={"enabled": True, "data": str(demos), "epochs": 1, "lr": 1e-3})
    cached, demo_nll = [], []
    # the second run: another RL seed and rate, the fine-tune's seed pinned to the first run's (run.seed 0)
    for name, more in (("a", []), ("b", ["run.seed=5", "trainer.lr=5e-4", "warm_start.seed=0",
                                         "warm_start.rl_nll_coef=0.5", "warm_start.rl_nll_batch=2"])):
        proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), f"run.name={name}", *more,
                               "--no-progress"], capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        rows = [json.loads(x) for x in (tmp_path / "runs" / name / "logs" / f"{name}.jsonl").read_text().splitlines()]
        cached.append(rows[0]["warm_start/cached"])
        demo_nll.append(rows[1].get("actor/demo_nll"))
    assert cached == [0.0, 1.0]
    assert demo_nll[0] is None and demo_nll[1] > 0
    a, b = (tmp_path / "runs" / n / "warm_start" / "model" / "model.safetensors" for n in "ab")
    assert a.read_bytes() == b.read_bytes()


def test_a_damaged_entry_means_a_fresh_fine_tune(tiny_llama_dir, tmp_path, fine_tunes):
    """An entry whose model went missing (evicted by another run meanwhile) or whose record is unreadable: the run
    says so and fine-tunes, then stores a whole entry again."""
    import shutil

    demos, lines = _demos(tmp_path), []
    _run(_cfg(tiny_llama_dir, demos), tmp_path / "runs", "a", lines)
    [entry] = [p for p in wc.cache_root().iterdir() if not p.name.startswith(".")]
    shutil.rmtree(entry / "model")
    done = json.loads((_run(_cfg(tiny_llama_dir, demos), tmp_path / "runs", "b", lines) / "done.json").read_text())
    assert done["cached"] == 0.0 and len(fine_tunes) == 2
    assert [ln for ln in lines if "could not be used" in ln and "fine-tuning" in ln]
    assert (entry / "model" / "model.safetensors").is_file()  # stored whole again
    (entry / wc.DONE).write_text("{not json")
    assert wc.lookup(entry.name) is None

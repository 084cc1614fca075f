"""Metrics sinks: a fake sink through MetricsLogger, and tensorboard for real (event files read back)."""

from __future__ import annotations

import pytest

from legorl.ops.metrics import MetricsLogger
from legorl.ops.sinks import MetricsSink, make_sinks, numeric, sinks_from_env


class FakeSink:
    def __init__(self, fail: bool = False):
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.closed = False
        self.fail = fail

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.fail:
            raise RuntimeError("tracker down")
        self.rows.append((step, metrics))

    def close(self) -> None:
        self.closed = True


def test_fake_sink_gets_numeric_copy_and_files_unchanged(tmp_path):
    sink, broken = FakeSink(), FakeSink(fail=True)
    assert isinstance(sink, MetricsSink)
    plain = MetricsLogger(tmp_path / "a", "exp", sinks=[])
    logger = MetricsLogger(tmp_path / "b", "exp", sinks=[sink, broken])
    m = {"actor/grad_norm": 0.5, "rollout/pass_rate": 1, "note": "x", "flag": True, "bad": float("nan")}
    for lg in (plain, logger):
        lg.log(1, m)
        lg.log(2, m)
    logger.close()
    assert sink.rows == [(s, {"actor/grad_norm": 0.5, "rollout/pass_rate": 1.0}) for s in (1, 2)]
    assert sink.closed and logger.sinks.sinks == []  # the broken one was dropped, the rest closed
    assert (tmp_path / "a" / "exp.jsonl").read_text() == (tmp_path / "b" / "exp.jsonl").read_text()
    assert (tmp_path / "a" / "exp.log").read_text() == (tmp_path / "b" / "exp.log").read_text()


def test_make_sinks_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown metrics sink"):
        make_sinks(["nope"], tmp_path, "exp")
    monkeypatch.delenv("LEGORL_METRICS_SINKS", raising=False)
    assert sinks_from_env(tmp_path, "exp") == []
    assert numeric({"a": 1, "b": True, "c": "s", "d": float("inf")}) == {"a": 1.0}


def test_tensorboard_sink(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install -e '.[dev]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("LEGORL_METRICS_SINKS", "tensorboard")
    logger = MetricsLogger(tmp_path, "exp")
    logger.log(1, {"critic/score/mean": 0.25})
    logger.log(2, {"critic/score/mean": 0.75})
    logger.close()
    ea = EventAccumulator(str(tmp_path / "tensorboard"))
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.75)]
    # with the run's config (what `legorl train` passes): its keys as text beside the scalars
    (sink,) = make_sinks(["tensorboard"], tmp_path / "run", "exp", config={"trainer": {"lr": 1e-3}})
    sink.log(1, {"actor/grad_norm": 2.0})
    sink.close()
    ea = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    ea.Reload()
    assert [e.value for e in ea.Scalars("actor/grad_norm")] == [2.0]
    (text,) = [t for t in ea.Tags()["tensors"] if t.startswith("config")]
    assert b"trainer.lr = 0.001" in ea.Tensors(text)[0].tensor_proto.string_val[0]

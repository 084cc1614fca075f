"""Preflight for the trainer at scale: the precision pair's expected logprob gap, the mismatch WARN, a gate
below the expected gap, and rank layouts that cannot run."""

from __future__ import annotations

from legorl.config import load_config
from legorl.ops.preflight_trainer import check_precision, check_trainer_layout


def levels(results) -> list[tuple[str, str]]:
    return [(r.level, r.message) for r in results]


def test_matching_fp32_pair_passes_with_its_expected_gap():
    out = levels(check_precision(load_config(None, ["trainer.max_logprob_abs_diff=1e-3"])))
    assert [lvl for lvl, _ in out] == ["PASS"] and "~1e-05" in out[0][1]


def test_bf16_trainer_against_fp32_engine_warns_and_names_the_gate():
    out = levels(check_precision(load_config(None, ["trainer.dtype=bfloat16", "trainer.max_logprob_abs_diff=1e-3"])))
    warns = [m for lvl, m in out if lvl == "WARN"]
    assert any("engine samples in float32" in m for m in warns)
    assert any("most batches will be refused" in m for m in warns)


def test_rank_layouts_that_cannot_run_are_fatal():
    gae = levels(check_trainer_layout(load_config(None, ["trainer.n_ranks=2", "algorithm.adv_estimator=gae"])))
    assert any(lvl == "FATAL" and "gae" in m for lvl, m in gae)
    assert [lvl for lvl, _ in levels(check_trainer_layout(load_config(None, ["trainer.n_ranks=2"])))] == ["PASS"]


def test_cpu_offload_without_a_gpu_is_fatal():
    from legorl.ops import hardware

    if hardware.count_gpus():
        return
    out = levels(check_trainer_layout(load_config(None, ["trainer.n_ranks=2", "trainer.cpu_offload=true"])))
    assert any(lvl == "FATAL" and "needs CUDA" in m for lvl, m in out)

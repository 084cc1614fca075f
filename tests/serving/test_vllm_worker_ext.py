"""The vLLM worker extension's receive path without vLLM: the module runs in vLLM's venv and cannot import
legorl, so its bucket layout is checked here against the cluster transport's `pack`, and its join / receive /
timeout against a real gloo pair hosted by `PairGroup` (the trainer's side), with a stand-in for vLLM's
`reload_weights` that keeps what the iterator yields. The real server: test_vllm_collective.py."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from legorl.serving.pairgroup import ALIGN, PairGroup, free_port, pack, wait_work
from legorl.serving.vllm import worker_ext
from legorl.serving.vllm.transfer import bucket_layout, plan_buckets


class FakeWorker(worker_ext.WeightReceiver):
    device = torch.device("cpu")

    def __init__(self):
        self.loaded: dict[str, torch.Tensor] = {}

    def reload_weights(self, weights_iterator, is_checkpoint_format=True):
        for name, t in weights_iterator:
            time.sleep(0.001)
            self.loaded[name] = t.clone()


def raw(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"a.weight": torch.randn(7, 3), "b.bias": torch.randn(5).to(torch.bfloat16),
            "c.ids": torch.arange(3, dtype=torch.int64), "d.weight": torch.randn(33, 17), "e.scale": torch.randn(())}


def test_layout_matches_the_cluster_pack():
    assert worker_ext.ALIGN == ALIGN
    sd = state()
    flat, dtypes, _ = pack(sd)
    lay = bucket_layout(4, sd)
    assert lay["nbytes"] == flat.numel() and lay["dtypes"] == list(dtypes) and lay["seq"] == 4
    views = worker_ext.bucket_views(flat, lay["names"], lay["dtypes"], lay["shapes"])
    assert [n for n, _ in views] == list(sd)
    for (name, v), t in zip(views, sd.values(), strict=True):
        assert v.dtype == t.dtype and torch.equal(raw(v), raw(t)), name
    with pytest.raises(ValueError, match="layout covers"):
        worker_ext.bucket_views(flat[:-ALIGN], lay["names"], lay["dtypes"], lay["shapes"])


def test_plan_buckets_keeps_order_and_bounds():
    sd = {f"t{i}": torch.zeros(n) for i, n in enumerate([10, 10, 30, 5, 5, 5])}  # fp32: 40, 40, 120, 20 ... bytes
    buckets = plan_buckets(sd, 80)
    assert [list(b) for b in buckets] == [["t0", "t1"], ["t2"], ["t3", "t4", "t5"]]


def join(timeout_s: float) -> tuple[FakeWorker, PairGroup]:
    port, box = free_port(), []
    host = threading.Thread(target=lambda: box.append(PairGroup.host(port, timeout_s)))
    host.start()
    w = FakeWorker()
    assert w.legorl_join("127.0.0.1", port, timeout_s)
    host.join(timeout_s + 5)
    return w, box[0]


def test_receive_over_a_gloo_pair_is_bitwise_and_a_missing_bucket_times_out():
    sd = state()
    buckets = plan_buckets(sd, 200)
    assert len(buckets) >= 2
    layouts = [bucket_layout(i, b) for i, b in enumerate(buckets)]
    w, pair = join(10.0)
    out: list = []
    t = threading.Thread(target=lambda: out.append(w.legorl_receive(layouts, 10.0)))
    t.start()
    for i, b in enumerate(buckets):
        wait_work(pair.send(pack(b)[0], i), 10.0, "send")
    t.join(30)
    assert out and out[0]["buckets"] == len(buckets) and out[0]["tensors"] == len(sd)
    for name, v in sd.items():
        assert torch.equal(raw(w.loaded[name]), raw(v)), name
    # the sender stops after the first bucket: the receive gives up within its timeout and leaves the group
    w, pair = join(10.0)
    errors: list = []

    def receive():
        try:
            w.legorl_receive(layouts, 2.0)
        except BaseException as exc:
            errors.append(exc)

    t0 = time.monotonic()
    t = threading.Thread(target=receive)
    t.start()
    wait_work(pair.send(pack(buckets[0])[0], 0), 10.0, "send")
    t.join(30)
    assert errors and time.monotonic() - t0 < 10
    assert getattr(w, "_legorl_group", None) is None
    with pytest.raises(RuntimeError, match="legorl_join first"):
        w.legorl_receive(layouts, 1.0)

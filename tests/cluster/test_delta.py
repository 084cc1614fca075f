"""Lossless weight deltas (`cluster.weight_delta`, cluster/delta.py) on real gloo pair groups, without Ray: the
trainer side is rank 0's own `_Wire` over a real tiny-llama (fp32 master weights) updated by real AdamW steps,
sending in the replicas' bf16 as a run with `serving.dtype = "bfloat16"` does; the replicas are two real bf16
embedded engines receiving through `receive_bucket` (what the replica actor runs). After each sync every
engine's weights must equal the trainer's cast to bf16 bitwise (what a full fp32 sync's copy would give); a re-formed pair (a revived replica) gets whole buckets while
the other keeps getting deltas; a replica that does not hold the base fails the checksum instead of serving
wrong weights."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest
import torch

from legorl.cluster import delta as D
from legorl.cluster.collective import CollectiveBucket, Receiver, Sender
from legorl.cluster.receive import receive_bucket
from legorl.cluster.trainer import _Wire
from legorl.serving.pairgroup import pack
from legorl.serving.replica_proc import ReplicaDiedError


def _flat(t: torch.Tensor) -> torch.Tensor:
    return pack({"t": t})[0]


@pytest.mark.parametrize("share", [0.0, 0.001, 0.2, 0.9, 1.0])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_encode_apply_is_bitwise_and_picks_the_smallest(share: float, dtype: torch.dtype):
    g = torch.Generator().manual_seed(int(share * 1000))
    old = torch.randn(4099, generator=g).to(dtype)
    new = old.clone()
    hit = torch.rand(old.shape, generator=g) < share
    new[hit] = (new[hit].float() * (1 + 1e-2 * torch.randn(int(hit.sum()), generator=g))).to(dtype)
    new[0] = -0.0 if share else new[0]  # -0.0 vs 0.0 and NaN payloads differ bitwise, not by value
    a, b = _flat(old), _flat(new)
    d = D.encode(a, b)
    words = int((a.view(torch.int16) != b.view(torch.int16)).sum())
    sizes = {"index": 6 * words, "mask": -(-b.numel() // 256) * 16 + 2 * words}
    if min(sizes.values()) >= b.numel():
        assert d is None  # the full bucket is not larger: it goes whole
        return
    assert d is not None and d.changed == words and d.payload.numel() == min(sizes.values())
    assert d.kind == ("same" if not words else min(sizes, key=lambda k: (sizes[k], k != "index")))
    assert d.payload.numel() == D.payload_nbytes(d.kind, b.numel(), words)
    base = a.clone()
    D.apply(base, d.kind, d.payload, d.changed)
    assert torch.equal(base, b) and D.checksum(base) == d.checksum


def _pairs(sender: Sender, names: list[str]) -> dict[str, Receiver]:
    recs = {}
    for name in names:
        port = sender.open(name)
        rec = Receiver()
        t = threading.Thread(target=rec.join, args=("127.0.0.1", port, 5.0, "gloo", name))
        t.start()
        sender.finish(name)
        t.join()
        recs[name] = rec
    return recs


async def _sync(model, sender: Sender, peers: tuple[str, ...], replicas: dict, version: int,
                bucket_bytes: int = 40_000) -> list[CollectiveBucket]:
    """One export of `model`'s weights through rank 0's `_Wire` to `peers`, applied by each replica's engine
    as the actor does (receive, then update in place, paused)."""
    from legorl.train.actor import _block

    out: queue.Queue = queue.Queue()

    def produce() -> None:
        wire = _Wire(sender, peers, out, torch.bfloat16)
        bucket: dict[str, torch.Tensor] = {}
        size = 0
        for name, value in model.state_dict().items():
            if size >= bucket_bytes and _block(name) != _block(next(reversed(bucket))):
                wire.put(bucket)
                bucket, size = {}, 0
            bucket[name] = value.detach()
            size += value.numel() * value.element_size()
        wire.put(bucket)
        wire.close()
        out.put(None)

    threading.Thread(target=produce, daemon=True).start()
    metas = []
    await asyncio.gather(*(replicas[p][1].pause() for p in peers))
    while (meta := await asyncio.to_thread(out.get)) is not None:
        metas.append(meta)

        async def one(p: str) -> None:
            rec, engine, _ = replicas[p]
            tensors = await receive_bucket(rec, meta, engine, p)
            await engine.update_weights(tensors, version)

        results = await asyncio.gather(*(one(p) for p in meta.peers), return_exceptions=True)
        for p, r in zip(meta.peers, results, strict=True):
            if isinstance(r, BaseException):
                replicas[p][2].append(r)
    await asyncio.gather(*(replicas[p][1].resume() for p in peers))
    return metas


def _step(model, opt, seed: int) -> None:
    """A real AdamW step on a next-token loss over random ids."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=g)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _same(model, engine) -> bool:
    want, got = model.state_dict(), engine.model.state_dict()
    return all(got[k].dtype == torch.bfloat16 and torch.equal(want[k].to(torch.bfloat16), got[k]) for k in want)


@pytest.mark.asyncio
async def test_delta_syncs_keep_replicas_bitwise_and_a_reformed_pair_gets_whole_buckets(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from legorl.serving.embedded import EmbeddedEngine

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5)
    engines = [EmbeddedEngine.from_pretrained(tiny_llama_dir, dtype=torch.bfloat16, kv_budget_tokens=2048, seed=0)
               for _ in range(2)]
    sender = Sender(timeout_s=3.0, delta=True)
    try:
        recs = _pairs(sender, ["a", "b"])
        reps = {p: (recs[p], e, []) for p, e in zip("ab", engines, strict=True)}
        shares = []
        for version in range(1, 5):
            _step(model, opt, version)
            metas = await _sync(model, sender, ("a", "b"), reps, version)
            assert not sender.failed and not reps["a"][2] and not reps["b"][2]
            assert all(_same(model, e) for e in engines), f"sync {version}: a replica differs from the trainer"
            assert all(e.weight_version == version for e in engines)
            shares.append(sum(m.nbytes for m in metas) / sum(m.full_nbytes for m in metas))
            if version == 1:  # nothing sent before: whole
                assert all(not m.delta for m in metas) and shares[0] == 1.0
            else:
                assert any(m.delta for m in metas) and all(set(m.delta_peers) <= {"a", "b"} for m in metas)
        assert max(shares[1:]) < 0.5, shares  # a bf16 copy at a small lr: most elements are bitwise unchanged

        # a sync with nothing changed sends nothing (no message per bucket); the replicas still check the sums
        metas = await _sync(model, sender, ("a", "b"), reps, 5)
        assert all(m.delta == "same" and m.nbytes == 0 for m in metas) and not sender.failed
        assert all(_same(model, e) for e in engines) and not reps["a"][2] and not reps["b"][2]

        # "b" is revived (a fresh pair): its next buckets go whole, "a" keeps getting deltas; both end bitwise
        reps["b"] = (_pairs(sender, ["b"])["b"], engines[1], [])
        _step(model, opt, 9)
        metas = await _sync(model, sender, ("a", "b"), reps, 6)
        assert all("b" not in m.delta_peers for m in metas) and any("a" in m.delta_peers for m in metas)
        assert all(_same(model, e) for e in engines) and sender.delta.holders == {"a", "b"}

        # a replica whose weights are not the sender's base (here: changed behind its back) fails the checksum,
        # is dropped as a dead replica would be, and does not hold the next version
        with torch.no_grad():
            engines[1].model.state_dict()["model.norm.weight"].add_(1.0)
        _step(model, opt, 10)
        await _sync(model, sender, ("a", "b"), reps, 7)
        assert reps["b"][2] and isinstance(reps["b"][2][0], ReplicaDiedError) and "delta" in str(reps["b"][2][0])
        assert _same(model, engines[0]) and not reps["a"][2]
    finally:
        for e in engines:
            await e.close()

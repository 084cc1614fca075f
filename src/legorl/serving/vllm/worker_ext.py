"""A vLLM worker extension that receives weights from the trainer over a process group (no files).

Loaded INSIDE the vLLM server (`vllm serve --worker-extension-cls legorl_vllm_worker_ext.WeightReceiver`, the
module copied under that name into a directory on the server's PYTHONPATH: `transfer.extension_dir`), which runs
in its own venv: this file imports only the standard library, torch and (inside methods) vLLM, never legorl.
Its methods become worker methods that `/collective_rpc` calls by name (kwargs are JSON):

- `legorl_join(host, port, timeout_s, backend)`: join a 2-member group with the trainer (rank 0 hosts a TCPStore
  at host:port, this worker is rank 1). The sender's backend: gloo (CPU tensors, also into a GPU worker: vLLM's
  loaders copy them over) or NCCL (GPU to GPU, buffers on the worker's device; same calls, untested here).
- `legorl_receive(buckets, timeout_s)`: each bucket (names, dtypes, shapes, nbytes, seq) is one message from rank
  0 into one flat uint8 buffer, laid out as `legorl.serving.pairgroup.pack` writes it (each tensor padded to
  `ALIGN` bytes); views of it go to vLLM's own in-place reload (`Worker.reload_weights(weights_iterator=...)`:
  `model.load_weights` with the layerwise re-processing the CPU build needs, since its linear layers keep a
  repacked copy). While vLLM loads one bucket the next one is being received (two buckets in memory at
  most). Every receive waits at most `timeout_s`; a failure closes the reload (layers not reached keep their
  weights), leaves the group and raises: the engine then reloads the whole model from files.
- `legorl_checksum()`: sha256 per parameter of what the model computes with (a linear layer whose weight the CPU
  build moved into a packed kernel is read back by multiplying the identity through that kernel), for tests.
- `legorl_leave()`: drop the group.
"""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

ALIGN = 16  # must equal legorl.serving.pairgroup.ALIGN (tests/serving/test_vllm_worker_ext.py checks)


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def bucket_views(flat: torch.Tensor, names: list[str], dtypes: list[str],
                 shapes: list[list[int]]) -> list[tuple[str, torch.Tensor]]:
    """(name, view of `flat`) per tensor of a packed bucket; raises if the layout does not cover `flat`."""
    sizes = [getattr(torch, dt).itemsize * int(torch.Size(shape).numel()) for dt, shape in zip(dtypes, shapes, strict=True)]
    if len(names) != len(sizes) or sum(map(_padded, sizes)) != flat.numel():
        raise ValueError(f"bucket layout covers {sum(map(_padded, sizes))} bytes of {len(sizes)} tensors, "
                         f"got {flat.numel()} bytes for {len(names)} names")
    out, off = [], 0
    for name, dt, shape, n in zip(names, dtypes, shapes, sizes, strict=True):
        out.append((name, flat[off:off + n].view(getattr(torch, dt)).view(tuple(shape))))
        off += _padded(n)
    return out


def digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (floating -0.0 folded into +0.0, which the identity read-back cannot tell)."""
    t = t.detach().to("cpu").contiguous()
    if t.is_floating_point():
        t = t + 0.0
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


class WeightReceiver:
    """Mixed into vLLM's worker class by `--worker-extension-cls` (methods only: no __init__)."""

    def legorl_join(self, host: str, port: int, timeout_s: float, backend: str = "gloo") -> bool:
        """`backend` is the sender's: gloo (CPU buffers here, copied onto the worker's device by vLLM's loaders)
        or nccl (buffers on this worker's GPU; untested here)."""
        self.legorl_leave()
        timeout = timedelta(seconds=float(timeout_s))
        store = dist.TCPStore(host, int(port), 2, False, timeout)
        if backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            pg = dist.ProcessGroupNCCL(store, 1, 2, opts)
            device = _device(self)
        else:
            pg, device = dist.ProcessGroupGloo(store, 1, 2, timeout), torch.device("cpu")
        self._legorl_group = (store, pg, device)
        return True

    def legorl_leave(self) -> bool:
        had = getattr(self, "_legorl_group", None) is not None
        self._legorl_group = None
        return had

    def legorl_receive(self, buckets: list[dict[str, Any]], timeout_s: float) -> dict[str, float]:
        group = getattr(self, "_legorl_group", None)
        if group is None:
            raise RuntimeError("legorl_receive: no weight-transfer group (call legorl_join first)")
        _, pg, device = group
        wait = timedelta(seconds=float(timeout_s))
        stats = {"buckets": 0, "tensors": 0, "bytes": 0, "wait_s": 0.0, "seconds": 0.0}  # wait_s: blocked on bytes
        t0 = time.perf_counter()

        def post(b: dict[str, Any]) -> tuple[torch.Tensor, Any]:
            flat = torch.empty(int(b["nbytes"]), dtype=torch.uint8, device=device)
            return flat, (pg.recv([flat], 0, int(b["seq"])) if flat.numel() else None)

        def weights():
            nxt = post(buckets[0]) if buckets else None
            for i, b in enumerate(buckets):
                flat, work = nxt
                tw = time.perf_counter()
                if work is not None and not work.wait(wait):
                    raise TimeoutError(f"weight bucket {b['seq']} not received within {timeout_s} s")
                stats["wait_s"] += time.perf_counter() - tw
                # the next bucket arrives while vLLM loads this one (two buckets in memory at most)
                nxt = post(buckets[i + 1]) if i + 1 < len(buckets) else None
                views = bucket_views(flat, b["names"], b["dtypes"], b["shapes"])
                stats["buckets"] += 1
                stats["tensors"] += len(views)
                stats["bytes"] += flat.numel()
                yield from views

        try:
            self.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
        except BaseException:
            self.legorl_leave()  # the pair is out of step: the engine forms a new one
            _close_reload(self)
            raise
        if stats["buckets"] != len(buckets):
            raise RuntimeError(f"vLLM consumed {stats['buckets']} of {len(buckets)} weight buckets")
        stats["seconds"] = time.perf_counter() - t0
        return stats

    def legorl_checksum(self) -> dict[str, str]:
        model = self.model_runner.get_model()
        out: dict[str, str] = {}
        with torch.no_grad():
            for mname, module in model.named_modules():
                for pname, p in module.named_parameters(recurse=False):
                    name = f"{mname}.{pname}" if mname else pname
                    if name in out:
                        continue
                    if pname == "weight" and p.numel() == 0 and hasattr(module, "cpu_linear"):
                        p = _read_packed_linear(module, p.dtype)
                    out[name] = digest(p)
        return out


def _device(worker: Any) -> torch.device:
    dev = getattr(worker, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def _read_packed_linear(module: Any, dtype: torch.dtype) -> torch.Tensor:
    """W of a CPU linear layer whose weight lives only in a packed kernel: identity(K) @ W^T = W^T, exact in
    floating point (each output is one weight plus exact zeros)."""
    k = int(getattr(module, "input_size_per_partition", 0) or module.input_size)
    eye = torch.eye(k, dtype=dtype)
    return module.cpu_linear(eye, module.weight, None).t().contiguous()


def _close_reload(worker: Any) -> None:
    """After a reload cut mid-way: unwrap vLLM's layerwise loaders (layers never reached get their tensors back)
    so the next reload, from files, starts clean."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload

        with set_current_vllm_config(worker.vllm_config):
            finalize_layerwise_reload(worker.model_runner.get_model(), worker.vllm_config.model_config)
    except Exception:  # best effort: the files reload that follows rebuilds every layer anyway
        pass

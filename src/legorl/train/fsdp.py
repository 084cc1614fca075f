"""FSDP2 sharding for the trainer ranks: gloo on CPU, NCCL on GPU, bf16 compute with fp32 master
weights through MixedPrecisionPolicy, optional CPU offload."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_distributed() -> tuple[int, int]:
    """Join the process group described by the environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, as
    torchrun and `legorl train --nproc` set them); a no-op for one process. Returns (rank, world)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:  # a Ray rank actor sees only its own GPU(s): LOCAL_RANK counts ranks on the node, not its GPUs
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        dist.init_process_group("nccl" if cuda else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_model(model: torch.nn.Module, dtype: torch.dtype = torch.float32,
                cpu_offload: bool = False) -> torch.nn.Module:
    """fully_shard each decoder layer, then the root (embeddings, norm, head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    from legorl.train.memory import decoder_layers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    kwargs: dict = {"mesh": mesh}
    if dtype != torch.float32:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        if device != "cuda":
            raise ValueError("trainer.cpu_offload moves FSDP2 state off the GPU: it needs CUDA (set it to false on CPU)")
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def save_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path, only=None) -> None:
    """Every rank writes its shards of the model and optimizer state (torch.distributed.checkpoint);
    `only(name)`: the model tensors to keep (LoRA: the adapter, not the frozen base)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    if only is not None:
        model_sd = {k: v for k, v in model_sd.items() if only(k)}
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))


def load_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path, only=None) -> None:
    """Read what `save_sharded` wrote (with the same `only`), with the same number of ranks, in place."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    if only is not None:
        model_sd = {k: v for k, v in model_sd.items() if only(k)}
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=StateDictOptions(strict=only is None))

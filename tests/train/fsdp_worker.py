"""torchrun worker for test_actor: one FSDP2 actor step; each rank is given the whole batch and trains
on its token-balanced share of the rows."""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from legorl.config import AlgorithmSection, TrainerSection
from legorl.train.actor import Actor
from legorl.train.fsdp import init_distributed, shard_model


def main() -> None:
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    rank, _ = init_distributed()
    batch = torch.load(out / "batch.pt", weights_only=False)
    model = shard_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    actor = Actor(model, TrainerSection(lr=1e-3, micro_batch_size=2, total_steps=2), AlgorithmSection(), 1.0)
    adv = (batch.rewards - batch.rewards.mean()).unsqueeze(-1) * batch.mask
    old = actor.compute_logprobs(batch)  # every rank gets the whole batch's logprobs back
    actor.update(batch, adv, old)
    state = actor.full_state_dict()
    if rank == 0:
        torch.save(state, out / "sharded.pt")
    # both ranks finish every collective before teardown: tearing gloo down while the peer still has
    # work in flight aborts the process ("terminate called without an active exception")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

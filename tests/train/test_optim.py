"""The AdamW the trainers step (train/optim.py): torch's fused kernel, the same update as the per-tensor loop
to fp32 rounding, and the one the RL actor builds (the warm start calls the same `adamw`)."""

from __future__ import annotations

import copy

import torch

from legorl.config import RunConfig
from legorl.train.actor import Actor
from legorl.train.optim import adamw


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((64, 32), (32,), (7, 5, 3))]


def test_fused_adamw_takes_the_per_tensor_loops_steps():
    fused, loop = _params(0), _params(0)
    a = adamw(fused, lr=1e-2, weight_decay=0.1)
    b = torch.optim.AdamW(loop, lr=1e-2, weight_decay=0.1, foreach=False)
    assert a.defaults["fused"] is True and b.defaults["fused"] is None
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        for p, q in zip(fused, loop, strict=True):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        a.step()
        b.step()
    for p, q, start in zip(fused, loop, _params(0), strict=True):
        assert (p - start).abs().max() > 1e-3  # five steps at lr 1e-2 moved every tensor
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)


def test_a_parameter_without_a_fused_kernel_falls_back_to_the_loop():
    wide = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]
    assert adamw(wide, lr=1e-3).defaults["fused"] is True  # float64 has the kernel on CPU
    meta = [torch.nn.Parameter(torch.zeros(3, device="meta"))]
    opt = adamw(meta, lr=1e-3)
    assert not opt.defaults["fused"] and opt.defaults["foreach"] is False


def test_the_actor_steps_the_fused_adamw(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    cfg = RunConfig()
    actor = Actor(model, cfg.trainer, cfg.algorithm, temperature=1.0)
    assert actor.optimizer.defaults["fused"] is True


def test_a_checkpoint_of_the_loop_resumes_on_the_fused_kernel_with_its_moments():
    """A state dict carries its writer's kernel flags: `keep_kernel` (the trainer's resume) loads the moments of a
    per-tensor-loop checkpoint (written before 2026-12-07) and keeps stepping fused, the loop's next step to 1e-6."""
    from legorl.train.optim import keep_kernel

    loop, resumed = _params(0), _params(0)
    old = torch.optim.AdamW(loop, lr=1e-2, weight_decay=0.1, foreach=False)
    g = torch.Generator().manual_seed(2)
    for p in loop:
        p.grad = torch.randn(p.shape, generator=g)
    old.step()
    for p, q in zip(resumed, loop, strict=True):
        p.data.copy_(q.data)
    new = adamw(resumed, lr=1e-2, weight_decay=0.1)
    saved = copy.deepcopy(old.state_dict())  # as torch.load reads it back: tensors of its own
    keep_kernel(new, lambda: new.load_state_dict(saved))
    assert new.param_groups[0]["fused"] is True and new.state[resumed[0]]["step"].dtype == torch.float32
    for p, q in zip(resumed, loop, strict=True):
        q.grad = torch.randn(q.shape, generator=g)
        p.grad = q.grad.clone()
    old.step()
    new.step()
    for p, q in zip(resumed, loop, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
    plain = adamw(_params(0), lr=1e-2, weight_decay=0.1)
    plain.load_state_dict(copy.deepcopy(old.state_dict()))
    assert not plain.param_groups[0]["fused"]  # what keep_kernel is for

"""The builtin scaffold with the default model (SmolLM2-135M) end to end, and the rollout's exactness."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from legorl.agents.base import ScaffoldLimits
from legorl.tasks import load_tasks
from legorl.workers import ProxyEndpoints, TrialSpec, WorkerConfig, run_trials

TEMPERATURE = 0.7


@pytest.mark.slow
async def test_builtin_with_default_model(smollm_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from legorl.models.chat import load_tokenizer
    from legorl.proxy import ProxyConfig, ProxyServer
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.manager import SingleReplicaManager

    engine = EmbeddedEngine.from_pretrained(smollm_dir, kv_budget_tokens=8192, seed=0)
    proxy = ProxyServer(SingleReplicaManager(engine, engine.max_model_len), load_tokenizer(smollm_dir), ProxyConfig())
    await proxy.start()
    tasks = {t.id: t for t in load_tasks("builtin:shell-basics")}
    root = Path("/tmp") / f"legorl-smoltest-{uuid.uuid4().hex[:8]}"
    cfg = WorkerConfig(
        limits=ScaffoldLimits(max_turns=3, max_tokens_per_call=48, temperature=TEMPERATURE),
        output_root=tmp_path, sandbox_opts={"root_dir": root}, scaffold_kwargs={"seed": 1},
    )
    try:
        specs = [TrialSpec(tasks["make-dir"]), TrialSpec(tasks["rename-file"])]
        results = await run_trials(specs, ProxyEndpoints(proxy), cfg)
    finally:
        await proxy.close()
        await engine.close()
        leftovers = list(root.iterdir()) if root.exists() else []
        shutil.rmtree(root, ignore_errors=True)
    assert not leftovers
    assert [r.outcome for r in results if r.outcome not in ("solved", "failed")] == [], [r.reason for r in results]
    hf = AutoModelForCausalLM.from_pretrained(smollm_dir, dtype=torch.float32).eval()
    for r in results:
        ro = r.tokens
        assert ro is not None and ro.num_policy_tokens > 0 and r.turns >= 1
        # the rollout is the proxy accumulator's main branch, token for token
        traj = json.loads((Path(r.artifacts_dir) / "proxy_trajectory.json").read_text())
        main = traj["branches"][0]
        assert ro.token_ids == main["token_ids"] and ro.response_mask == main["mask"]
        assert [lp for lp, m in zip(main["logprobs"], main["mask"], strict=True) if m] == [
            lp for lp, m in zip(ro.logprobs, ro.response_mask, strict=True) if m]
        # and its behaviour logprobs equal a teacher-forced HF forward on the same model
        with torch.no_grad():
            logits = hf(torch.tensor([ro.token_ids])).logits[0]
        ids = torch.tensor(ro.token_ids[1:])[:, None]
        lp = torch.log_softmax(logits[:-1].float() / TEMPERATURE, -1).gather(1, ids)[:, 0]
        diffs = [abs(lp[i - 1].item() - ro.logprobs[i]) for i, m in enumerate(ro.response_mask) if m]
        assert max(diffs) < 1e-4, max(diffs)

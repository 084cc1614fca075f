"""In-process placement (the default): engine replicas, server manager and proxy in this process.

Everything binds 127.0.0.1. The same pieces become Ray actors in the Ray placement; callers only
see the `ServerManager` and the proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from legorl.config import RunConfig
from legorl.models.chat import load_tokenizer
from legorl.models.store import resolve_model
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.manager import ServerManager, SingleReplicaManager


@dataclass
class InProcessRuntime:
    model_dir: Path
    engines: list[EmbeddedEngine]
    manager: ServerManager
    proxy: ProxyServer
    tokenizer: object

    @classmethod
    async def start(cls, cfg: RunConfig) -> InProcessRuntime:
        r = cfg.rollout
        if r.engine != "embedded":
            raise NotImplementedError(f"rollout.engine={r.engine!r} is not available in-process yet; use 'embedded'")
        if r.n_replicas != 1:
            raise NotImplementedError("rollout.n_replicas > 1 needs the load-balanced pool (not landed yet)")
        model_dir = resolve_model(cfg.model.path)
        engine = EmbeddedEngine.from_pretrained(
            model_dir, kv_budget_tokens=r.kv_budget_tokens, max_model_len=r.max_prompt_len + r.max_response_len,
            seed=cfg.run.seed, max_num_seqs=max(r.concurrency, 1),
        )
        await engine.start()
        manager = SingleReplicaManager(engine, engine.max_model_len)
        tokenizer = load_tokenizer(model_dir)
        proxy = ProxyServer(manager, tokenizer, ProxyConfig(tool_parser=r.tool_parser))
        await proxy.start()
        return cls(model_dir, [engine], manager, proxy, tokenizer)

    async def close(self) -> None:
        await self.proxy.close()
        for e in self.engines:
            await e.close()

"""First-turn replies of a run config's model and builtin scaffold: do they parse as actions?

Cheap evidence for choosing native tool calls or the text protocol before a training run: one model
call per (task, sample) through the real proxy (its tool parser and parse-failure counter), no sandbox.

    .venv/bin/python scripts/probe_first_turn.py examples/agent.toml --tasks '*-1' -k 2
    (a variant: a copy of the config with other agent.kwargs, or key=value overrides after the path)
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import time
from collections import Counter

import openai

from legorl.agents.builtin import BuiltinScaffold
from legorl.agents.builtin_tools import text_action
from legorl.config import load_config
from legorl.models import prepare_model
from legorl.models.chat import load_tokenizer
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.manager import SingleReplicaManager
from legorl.tasks import load_tasks


async def probe(cfg, glob: str, k: int, show: int) -> Counter:
    sc, ro = BuiltinScaffold(**cfg.agent.kwargs), cfg.rollout
    model = prepare_model(cfg.model.path)
    engine = EmbeddedEngine.from_pretrained(model, kv_budget_tokens=cfg.serving.kv_budget_tokens, seed=cfg.run.seed)
    proxy = ProxyServer(SingleReplicaManager(engine, engine.max_model_len), load_tokenizer(model),
                        ProxyConfig(tool_parser=cfg.agent.tool_parser))
    await proxy.start()
    tasks = [t for t in sorted(load_tasks(cfg.tasks.train), key=lambda t: t.id) if fnmatch.fnmatch(t.id, glob)]
    stats: Counter = Counter()

    async def one(task, seed: int) -> None:
        s = proxy.open_session()
        client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
        messages = sc.first_messages(task.instruction)
        try:
            r = await client.chat.completions.create(
                model="policy", messages=messages, max_tokens=ro.max_response_len, temperature=ro.temperature,
                seed=seed, **({"tools": sc.tools} if sc.tools else {}))
        finally:
            await client.close()
            rec = await proxy.close_session(s.id)
        msg = r.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]
        action = text_action(msg.content) if not calls else None
        stats.update(replies=1, with_tool_call=bool(calls), text_action=action is not None,
                     parse_failures=rec.counters.tool_parse_failures)
        if stats["replies"] <= show:
            print(f"{task.id}: {json.dumps(msg.content)[:160]} {calls}")

    try:
        await asyncio.gather(*(one(t, seed) for t in tasks for seed in range(k)))
    finally:
        await proxy.close()
        await engine.close()
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="key=value config overrides")
    ap.add_argument("--tasks", default="*", help="task-id glob (default: all of tasks.train)")
    ap.add_argument("-k", type=int, default=1, help="samples per task")
    ap.add_argument("--show", type=int, default=12, help="replies to print")
    a = ap.parse_args()
    t0 = time.monotonic()
    stats = asyncio.run(probe(load_config(a.config, a.overrides), a.tasks, a.k, a.show))
    print(dict(stats), f"{time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()

"""What `legorl eval` and `legorl infer` share: the policy stack, k trials per task, pass@k.

The stack is the in-process default (embedded engine + proxy: tokens captured), a remote
OpenAI-compatible server (`base_url`: any served model; tokens are NOT captured, nothing to train
on), or nothing for scaffolds that never call a model (oracle, nop).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.agents.base import SCAFFOLDS
from legorl.tasks.model import Task
from legorl.workers.artifacts import result_record
from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import DirectEndpoints, EndpointProvider, NoEndpoints, ProxyEndpoints
from legorl.workers.types import TrialResult, TrialSpec
from legorl.workers.worker import AgentLoopWorker, OnResult


def scaffold_class(spec: str) -> type:
    """The scaffold class behind a registered name or `module:Class` (ValueError when unknown)."""
    import legorl.agents  # noqa: F401  (registers the built-in names)

    target = SCAFFOLDS.get(spec, spec)
    if ":" not in target:
        raise ValueError(f"unknown agent {spec!r}: use one of {', '.join(sorted(SCAFFOLDS))} or 'module:Class'")
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load agent {spec!r} ({target}): {exc}") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if n < 1 or k < 1:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def is_solved(r: TrialResult) -> bool:
    """A sample counts as correct when the verifier gave full reward (whatever else happened)."""
    return r.reward is not None and r.reward >= 1.0


@dataclass
class TaskStats:
    task_id: str
    n: int = 0
    solved: int = 0
    rewards: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: list[str] = field(default_factory=list)

    def pass_at(self, k: int) -> float:
        return pass_at_k(self.n, self.solved, k)


@dataclass
class EvalReport:
    k: int
    results: list[TrialResult]
    tasks: dict[str, TaskStats]

    @classmethod
    def from_results(cls, results: Sequence[TrialResult], k: int) -> EvalReport:
        tasks: dict[str, TaskStats] = {}
        for r in results:
            s = tasks.setdefault(r.spec.task.id, TaskStats(r.spec.task.id))
            s.n += 1
            s.solved += is_solved(r)
            s.rewards.append(float(r.reward or 0.0))
            s.outcomes[r.outcome] += 1
            if r.reason and r.outcome not in ("solved", "failed"):
                s.reasons.append(r.reason)
        return cls(k, list(results), tasks)

    def mean_pass(self, k: int) -> float:
        return sum(s.pass_at(k) for s in self.tasks.values()) / len(self.tasks) if self.tasks else 0.0

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "pass@1": self.mean_pass(1),
            f"pass@{self.k}": self.mean_pass(self.k),
            "num_tasks": len(self.tasks),
            "num_trials": len(self.results),
            "outcomes": dict(self.outcomes),
            "tasks": {
                t: {"n": s.n, "solved": s.solved, "pass@1": s.pass_at(1), f"pass@{self.k}": s.pass_at(self.k),
                    "outcomes": dict(s.outcomes)}
                for t, s in self.tasks.items()
            },
            "trials": [result_record(r) for r in self.results],
        }

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "results.json"
        path.write_text(json.dumps(self.to_json(), indent=1, default=str))
        return path


@dataclass
class PolicySpec:
    model: str | None = None  # store name or HF dir (embedded); with base_url: the served model's name
    base_url: str | None = None
    api_key: str = "legorl"
    kv_budget_tokens: int = 32768
    max_model_len: int | None = None
    tool_parser: str = "hermes"
    seed: int = 0
    engine: str = "embedded"  # or "vllm": a vLLM server legorl starts for the run


class PolicyStack:
    """Async context manager yielding the EndpointProvider for a run; shuts everything down after."""

    def __init__(self, spec: PolicySpec, needs_model: bool = True):
        self.spec, self.needs_model = spec, needs_model
        self.engine: Any = None
        self.proxy: Any = None
        self.captures_tokens = False

    async def __aenter__(self) -> EndpointProvider:
        s = self.spec
        if not self.needs_model:
            return NoEndpoints()
        if s.base_url:
            model = s.model or await asyncio.to_thread(_first_model, s.base_url, s.api_key)
            return DirectEndpoints(s.base_url, model, s.api_key)
        from legorl.models import DEFAULT_MODEL, resolve_model
        from legorl.models.chat import load_tokenizer
        from legorl.proxy import ProxyConfig, ProxyServer
        from legorl.serving.launch import start_engine
        from legorl.serving.manager import SingleReplicaManager

        path = resolve_model(s.model or DEFAULT_MODEL)
        self.engine = await start_engine(path, s.engine, kv_budget_tokens=s.kv_budget_tokens, seed=s.seed,
                                         max_model_len=s.max_model_len)
        tok = await asyncio.to_thread(load_tokenizer, path)
        manager = SingleReplicaManager(self.engine, self.engine.max_model_len)
        self.proxy = ProxyServer(manager, tok, ProxyConfig(tool_parser=s.tool_parser))
        await self.proxy.start()
        self.captures_tokens = True
        return ProxyEndpoints(self.proxy)

    async def __aexit__(self, *exc: object) -> None:
        if self.proxy is not None:
            await self.proxy.close()
        if self.engine is not None:
            await self.engine.close()


def _first_model(base_url: str, api_key: str) -> str:
    """The first model a remote server lists (so `--base-url` alone is enough)."""
    import urllib.request

    base = base_url.rstrip("/")
    url = (base if base.endswith("/v1") else base + "/v1") + "/models"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        data = json.loads(resp.read())
    return data["data"][0]["id"]


def make_specs(tasks: Sequence[Task], k: int, step: int = 0) -> list[TrialSpec]:
    """k attempts per task; the attempts of one task share a group id."""
    return [TrialSpec(task=t, attempt=a, group_id=t.id, step=step) for t in tasks for a in range(k)]


async def evaluate(
    tasks: Sequence[Task], k: int, config: WorkerConfig, policy: PolicySpec, on_result: OnResult | None = None
) -> EvalReport:
    """Run k trials per task with one scaffold and one policy; the report holds every trial."""
    needs_model = getattr(scaffold_class(config.scaffold), "needs_model", True)
    async with PolicyStack(policy, needs_model) as endpoints:
        worker = AgentLoopWorker(config, endpoints)
        results = await worker.run_trials(make_specs(tasks, k), on_result)
    return EvalReport.from_results(results, k)

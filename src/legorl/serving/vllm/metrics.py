"""Read a vLLM server's Prometheus `/metrics` page into the numbers the scheduler and stats need.

Only the families legorl uses are kept; labels are summed away (one engine per server here; a
data-parallel server reports one series per engine and the sums are what a replica means).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """`name -> [(labels, value), ...]` for every sample line of a Prometheus text exposition."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


@dataclass(frozen=True)
class VLLMMetrics:
    """One reading of a server's counters; `kv_cache_usage` is NaN when the server did not report it."""

    kv_cache_usage: float = math.nan
    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    requests_finished: int = 0
    kv_budget_tokens: int = 0

    @classmethod
    def parse(cls, text: str) -> VLLMMetrics:
        fam = parse_prometheus(text)

        def total(name: str) -> float:
            return sum(v for _, v in fam.get(name, []))

        kv = fam.get("vllm:kv_cache_usage_perc")
        budget = 0
        for labels, _ in fam.get("vllm:cache_config_info", []):
            budget = _kv_tokens(labels)
        return cls(
            kv_cache_usage=max(v for _, v in kv) if kv else math.nan,
            running=int(total("vllm:num_requests_running")),
            waiting=int(total("vllm:num_requests_waiting")),
            prompt_tokens=int(total("vllm:prompt_tokens_total")),
            prefix_cache_queries=int(total("vllm:prefix_cache_queries_total")),
            prefix_cache_hits=int(total("vllm:prefix_cache_hits_total")),
            generation_tokens=int(total("vllm:generation_tokens_total")),
            preemptions=int(total("vllm:num_preemptions_total")),
            requests_finished=int(total("vllm:request_success_total")),
            kv_budget_tokens=budget,
        )


def _kv_tokens(labels: dict[str, str]) -> int:
    """KV capacity in tokens from `vllm:cache_config_info` labels (0 when not reported)."""
    try:
        return int(labels["kv_cache_size_tokens"])
    except (KeyError, ValueError):
        pass
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return 0

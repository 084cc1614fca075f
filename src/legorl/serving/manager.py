"""The server manager: the only way callers (proxy, trainer) reach inference replicas.

Callers never hold an engine directly, so load balancing, session admission control and partial
rollout can be added here without touching them. `SingleReplicaManager` is the one-engine case; the
load-balanced pool implements the same protocol.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from legorl.serving.types import Engine, GenerateRequest, TokenOutput


@runtime_checkable
class ServerManager(Protocol):
    @property
    def weight_version(self) -> int: ...

    @property
    def max_model_len(self) -> int: ...

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Route one generation (sticky on `request.session_id` when set)."""
        ...

    async def prompt_logprobs(
        self, token_ids: list[int], session_id: str | None = None, temperature: float = 1.0,
        adapter: str | None = None,
    ) -> list[float | None]:
        """`adapter`: a named LoRA adapter the replicas hold (None: the policy)."""
        ...

    async def abort(self, request_id: str) -> TokenOutput | None: ...

    def end_session(self, session_id: str) -> None:
        """The session is over: release its stickiness / admission state."""
        ...


def adapter_kw(adapter: str | None) -> dict[str, str]:
    """The `adapter` keyword for an engine call, only when one is named (engines without LoRA lack it)."""
    return {"adapter": adapter} if adapter is not None else {}


class SingleReplicaManager:
    """A manager over exactly one engine (the default until the load-balanced pool is used)."""

    def __init__(self, engine: Engine, max_model_len: int):
        self.engine = engine
        self._max_model_len = max_model_len

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        return await self.engine.generate(request)

    async def prompt_logprobs(
        self, token_ids: list[int], session_id: str | None = None, temperature: float = 1.0,
        adapter: str | None = None,
    ) -> list[float | None]:
        return await self.engine.prompt_logprobs(token_ids, temperature=temperature, **adapter_kw(adapter))

    async def abort(self, request_id: str) -> TokenOutput | None:
        return await self.engine.abort(request_id)

    def end_session(self, session_id: str) -> None:
        return None

"""Which policy a request's `model` field names: the base, or a named LoRA adapter the replicas hold.

`legorl serve --adapter NAME=DIR` serves several adapters over one base; a client picks one by the `model`
of its request (OpenAI chat, Responses, Anthropic messages alike). The base model's name (or no name) is
the base. While no adapter is held, any name is the policy, as before: agent CLIs send names of their own
(`claude-...`, `gpt-...`). Once adapters are held, a name that is neither the base nor an adapter is
refused with a 404 that lists the names there are (`/v1/models` lists them too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from legorl.proxy.errors import ProxyError

AdapterSource = Callable[[], Mapping[str, int]]  # adapter name -> weight version (e.g. EmbeddedEngine.adapters)


class ModelNames:
    def __init__(self, base: str, adapters: AdapterSource | None = None):
        self.base = base
        self.adapters: AdapterSource = adapters or dict

    def names(self) -> list[str]:
        """The base first, then the adapters."""
        return [self.base, *sorted(n for n in self.adapters() if n != self.base)]

    def resolve(self, model: str | None) -> str | None:
        """The adapter `model` names (None: the base / the policy); ProxyError 404 for an unknown name."""
        held = self.adapters()
        if not held or not model or model == self.base:
            return None
        if model in held:
            return model
        raise ProxyError(404, f"model {model!r} does not exist here; use one of: {', '.join(self.names())}",
                         code="model_not_found", param="model")

"""Tool-call parsers (a registry keyed by name): `hermes`, `qwen3_coder`."""

from legorl.proxy.parsers import hermes, qwen3_coder  # noqa: F401  (registers the built-ins)
from legorl.proxy.parsers.base import (
    ParseResult,
    ToolParser,
    available_parsers,
    get_parser,
    new_call_id,
    register_parser,
)

__all__ = ["ParseResult", "ToolParser", "available_parsers", "get_parser", "new_call_id", "register_parser"]

"""In-process proxy: OpenAI chat + Anthropic messages (+ SSE) in front of a ServerManager, recording
the exact tokens of every session (see docs/proxy.md)."""

from legorl.proxy.config import ProxyConfig
from legorl.proxy.record import BranchRecord, Counters, SessionRecord
from legorl.proxy.server import ProxyServer
from legorl.proxy.session import Session

__all__ = ["BranchRecord", "Counters", "ProxyConfig", "ProxyServer", "Session", "SessionRecord"]

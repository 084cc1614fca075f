"""Stop strings end the generation, not only the reply text.

Without this the engine samples on to `max_tokens` after a stop string and the proxy cuts the text
afterwards (`CallCapture._cut`): decode time spent on tokens nobody keeps, and a streamed call that goes
quiet after the stop string until `max_tokens`. `StopWatch` is the call's token sink: it decodes the tail
of what was sampled after every chunk and, at the first stop string, asks for the generation to be
aborted; the capture then commits the partial output, cut at the stop string exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# byte-level BPE: a character takes at most 4 tokens (byte fallback); the window also covers a
# few tokens of left context so the first characters of the window decode whole
_TOKENS_PER_CHAR = 4
_CONTEXT = 8


class StopWatch:
    """Token sink that watches for `stops` in the decoded reply and calls `on_hit` once, at the first one.
    `forward`: the sink behind it (a streamed call's `TextStream`), fed every chunk first."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Iterable[str],
                 forward: Callable[[list[int]], None] | None = None) -> None:
        self._decode = decode
        self._stops = [s for s in stops if s]
        self._span = _TOKENS_PER_CHAR * max((len(s) for s in self._stops), default=0) + _CONTEXT
        self._forward = forward
        self.ids: list[int] = []
        self.hit = False
        self.on_hit: Callable[[], None] | None = None

    def __call__(self, ids: list[int]) -> None:
        if self._forward is not None:
            self._forward(ids)
        if self.hit or not self._stops:
            return
        self.ids.extend(ids)
        tail = self._decode(self.ids[-(self._span + len(ids)):])
        if any(s in tail for s in self._stops):
            self.hit = True
            if self.on_hit is not None:
                self.on_hit()

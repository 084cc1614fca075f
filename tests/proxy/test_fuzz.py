"""Hostile input over the whole request schema of both APIs: never a 5xx, never another session hurt.

Hypothesis draws schema-shaped bodies (every field of the OpenAI chat and Anthropic messages requests,
numbers at their extremes, JSON nested past every parser's limit, bodies gzip'd, deflated, broken,
re-encoded) while a second session keeps making valid calls on the same engine: each of those must
succeed, and the server must answer /health at the end. Bounded (derandomized, ~200 examples).
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import json
import zlib

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import make_proxy

OA, AN = "/v1/chat/completions", "/v1/messages"


class Raw:
    """A JSON value written as raw text: nesting deeper than json.dumps goes, or 1e999 / NaN."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:24]!r}, {len(self.text)} chars)"


def nested(kind: str, n: int) -> Raw:
    if kind == "[":
        return Raw("[" * n + "]" * n)
    if kind == "{":
        return Raw('{"a":' * n + "1" + "}" * n)
    return Raw(json.dumps("[" * n + "]" * n))  # a JSON *string* holding deep JSON (OpenAI tool-call arguments)


FLOATS = [0.0, -0.0, 5e-324, 1e-300, 1e-6, 0.5, 1.0, 2.0, 1e20, 1e308, -1.0, -1e308, 1.7976931348623157e308]
INTS = [-(2**64), -(2**63), -1, 0, 1, 2, 3, 7, 10**6, 2**31, 2**63 - 1, 2**63, 2**64, 10**30]
number = st.sampled_from(FLOATS + INTS) | st.sampled_from([Raw("1e999"), Raw("-1e999"), Raw("NaN")])
deep = st.builds(nested, st.sampled_from("[{\""), st.sampled_from([3, 150, 199, 250, 1_000, 20_000]))
leaf = st.none() | st.booleans() | number | st.text(max_size=6)
value = st.recursive(leaf | deep, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                     max_leaves=6)
text = st.text(max_size=12) | st.sampled_from(["", "<|im_end|>", "<tool_call>", "\x00", "\ud7ff\U0010ffff", "x" * 2000])
small = st.sampled_from([1, 2, 3])


def obj(required: dict, optional: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(required, optional=optional)


# -- OpenAI chat completions ----------------------------------------------------------------------
oa_args = st.one_of(text, deep, st.dictionaries(st.text(max_size=3), value, max_size=2), value)
oa_call = obj({"id": st.text(max_size=4), "function": obj({"name": text}, {"arguments": oa_args})},
              {"type": st.sampled_from(["function", "nope"]) | value})
oa_content = st.one_of(text, st.none(), st.lists(obj({"type": st.sampled_from(["text", "image_url"]), "text": text},
                                                     {}), max_size=2), value)
oa_message = obj({"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "x"]),
                  "content": oa_content},
                 {"tool_calls": st.lists(oa_call, max_size=2) | value, "tool_call_id": text, "name": text})
oa_tool = obj({"function": obj({"name": text}, {"description": text, "parameters": value})},
              {"type": st.just("function") | value})
oa_body = obj(
    {"messages": st.lists(oa_message, min_size=1, max_size=3) | value},
    {"model": text, "tools": st.lists(oa_tool, max_size=2) | value,
     "tool_choice": st.sampled_from(["none", "auto", "required"]) | obj({"function": obj({"name": text}, {})}, {}),
     "temperature": number | value, "top_p": number | value, "top_k": number, "max_tokens": number | small,
     "max_completion_tokens": number | small, "n": number, "stop": text | st.lists(text, max_size=3) | value,
     "seed": number, "stream": st.booleans() | value, "stream_options": obj({}, {"include_usage": st.booleans()}),
     "logprobs": st.booleans() | value, "top_logprobs": number, "ignore_eos": st.booleans()},
)

# -- Anthropic messages ---------------------------------------------------------------------------
an_block = st.one_of(
    obj({"type": st.just("text"), "text": text}, {}),
    obj({"type": st.just("tool_use"), "id": text, "name": text, "input": value}, {}),
    obj({"type": st.just("tool_result"), "tool_use_id": text},
        {"content": text | st.lists(obj({"type": st.just("text"), "text": text}, {}), max_size=2) | value,
         "is_error": st.booleans() | value}),
    obj({"type": st.sampled_from(["thinking", "redacted_thinking", "image", "document"])}, {"thinking": text}),
)
an_message = obj({"role": st.sampled_from(["user", "assistant", "system"]),
                  "content": text | st.lists(an_block, max_size=3) | value}, {})
an_body = obj(
    {"messages": st.lists(an_message, min_size=1, max_size=3) | value, "max_tokens": small | number},
    {"model": text, "system": text | st.lists(obj({"type": st.just("text"), "text": text}, {}), max_size=2) | value,
     "tools": st.lists(obj({"name": text}, {"description": text, "input_schema": value}), max_size=2) | value,
     "tool_choice": obj({"type": st.sampled_from(["auto", "any", "tool", "none", "x"])}, {"name": text}) | value,
     "temperature": number | value, "top_p": number | value, "top_k": number,
     "stop_sequences": st.lists(text, max_size=3) | value, "stream": st.booleans() | value, "seed": number},
)

# -- valid bodies with sampling values at the edges of their ranges (these reach the engine) ----------
edge_t = st.sampled_from([0.0, 5e-324, 1e-300, 1e-5, 0.7, 1.0, 1e20, 1e308])
edge_p = st.sampled_from([5e-324, 1e-300, 1e-9, 0.5, 1.0])
edge_k = st.sampled_from([0, 1, 2, 2**31, 2**63 - 1])
chat = [{"role": "user", "content": "hi"}]
edge_oa = obj({"messages": st.just(chat)}, {"temperature": edge_t, "top_p": edge_p, "top_k": edge_k,
                                           "max_tokens": small, "seed": st.sampled_from([0, -(2**63), 2**63 - 1]),
                                           "stream": st.booleans(), "logprobs": st.booleans()})
edge_an = obj({"messages": st.just(chat), "max_tokens": small},
              {"temperature": edge_t, "top_p": edge_p, "top_k": edge_k, "stream": st.booleans()})

ENCODINGS = ["identity", "gzip", "deflate", "gzip-cut", "deflate-garbage", "utf-16", "bad-utf8", "bom", "x-unknown", "br"]


def to_json(v) -> str:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(to_json(x) for x in v) + "]"
    return json.dumps(v)


def encode(text: str, how: str) -> tuple[bytes, dict[str, str]]:
    raw = text.encode("utf-8", "surrogatepass")
    ct = {"Content-Type": "application/json"}
    if how == "gzip":
        return gzip.compress(raw), {**ct, "Content-Encoding": "gzip"}
    if how == "deflate":
        return zlib.compress(raw), {**ct, "Content-Encoding": "deflate"}
    if how == "gzip-cut":
        return gzip.compress(raw)[: max(4, len(raw) // 3)], {**ct, "Content-Encoding": "gzip"}
    if how == "deflate-garbage":
        return b"\x78\x9c" + raw[:50], {**ct, "Content-Encoding": "deflate"}
    if how == "utf-16":
        return text.encode("utf-16", "surrogatepass"), {"Content-Type": "application/json; charset=utf-16"}
    if how == "bad-utf8":
        return raw[:10] + b"\xff\xfe\xc0" + raw[10:], ct
    if how == "bom":
        return b"\xef\xbb\xbf" + raw, ct
    if how in ("x-unknown", "br"):
        return raw, {**ct, "Content-Encoding": how}
    return raw, ct


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.tuples(st.just(OA), oa_body), st.tuples(st.just(AN), an_body),
                 st.tuples(st.just(OA), edge_oa), st.tuples(st.just(AN), edge_an),
                 st.tuples(st.sampled_from([OA, AN]), value)),
       st.sampled_from(ENCODINGS))
def fuzz_schema(ctx, case, how):
    loop, url, seen = ctx
    path, payload = case
    data, headers = encode(to_json(payload), how)

    async def go():
        async with aiohttp.ClientSession() as http, http.post(url + path, data=data, headers=headers) as r:
            return r.status, await r.read()

    status, body = loop.run_until_complete(go())
    seen.append(status)
    assert status < 500, (path, how, data[:300], body[:300])


def test_fuzz_whole_schema_no_5xx_no_cross_session_failure(manager, tokenizer):
    loop = asyncio.new_event_loop()
    server = make_proxy(manager, tokenizer, default_max_tokens=2, max_body_bytes=1 << 20, large_body_bytes=64 << 10)
    bystander: list[int] = []
    stop = asyncio.Event()

    async def keep_calling(base: str) -> None:
        """Session A: valid calls, one after another, all through the fuzz."""
        msgs = [{"role": "user", "content": "keep going"}]
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                async with http.post(base + OA, json={"messages": msgs, "max_tokens": 4, "ignore_eos": True}) as r:
                    bystander.append(r.status)
                    await r.read()

    try:
        loop.run_until_complete(server.start())
        victim = server.open_session()
        task = loop.create_task(keep_calling(victim.base_url))
        seen: list[int] = []
        fuzz_schema((loop, server.open_session().base_url, seen))
        stop.set()
        loop.run_until_complete(task)

        async def health():
            async with aiohttp.ClientSession() as http, http.get(server.url + "/health") as r:
                return r.status

        assert loop.run_until_complete(health()) == 200
        assert len(bystander) >= 5 and set(bystander) == {200}, bystander
        counts = collections.Counter(seen)
        assert counts[200] >= 40 and counts[400] >= 40, counts  # the fuzz reached the engine and the validators
    finally:
        loop.run_until_complete(server.close())
        loop.close()


async def test_hostile_bodies_get_a_4xx_with_a_message(proxy):
    s = proxy.open_session()
    hi = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    args = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "ARGS"}}]}
    deep_call = {**hi, "messages": [*hi["messages"], args, {"role": "tool", "tool_call_id": "c", "content": "x"}]}
    big = json.dumps({"messages": [{"role": "user", "content": "hello " * 20_000}]}).encode()
    cases = [  # (body, Content-Encoding, status, words in the message)
        (json.dumps(deep_call).replace('"ARGS"', json.dumps("[" * 100_000 + "]" * 100_000)), None, 400,
         "nested too deeply"),
        (json.dumps(deep_call).replace('"ARGS"', '{"a":' * 5_000 + "1" + "}" * 5_000), None, 400, "recursion"),
        (b"\x1f\x8b garbage", "gzip", 400, "could not decode the gzip"),
        (zlib.compress(big)[:-5], "deflate", 400, "truncated"),  # once hung aiohttp's reader for good
        (zlib.compress(b" " * (2 << 20)), "deflate", 413, "once decoded"),  # the fixture's limit is 256 KiB
        (json.dumps(hi).encode(), "br", 415, "unsupported Content-Encoding"),
        (gzip.compress(json.dumps(hi).encode()), "gzip", 200, ""),
        (zlib.compress(json.dumps(hi).encode()), "deflate", 200, ""),
    ]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        for body, enc, status, words in cases:
            headers = {"Content-Type": "application/json", **({"Content-Encoding": enc} if enc else {})}
            async with http.post(s.base_url + OA, data=body, headers=headers) as r:
                out = await r.json(content_type=None)
            assert r.status == status, (enc, out)
            if status != 200:
                assert words in out["error"]["message"], out
        async with http.post(s.base_url + OA, json=hi) as r:
            assert r.status == 200

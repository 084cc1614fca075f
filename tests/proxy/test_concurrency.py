"""16 sessions at once: 16 clean, separate trajectories."""

from __future__ import annotations

import asyncio

import anthropic
import openai

from .helpers import teacher_forced


async def one_session(proxy, i: int):
    s = proxy.open_session(metadata={"trial": i})
    marker = f"session-{i}-marker"
    if i % 2:
        c = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
        msgs = [{"role": "user", "content": marker}]
        for turn in range(2):
            r = await c.chat.completions.create(model="p", messages=msgs, max_tokens=4, seed=i * 10 + turn)
            msgs += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"{marker} turn {turn}"}]
    else:
        a = anthropic.AsyncAnthropic(base_url=s.anthropic_base_url, api_key="unused", max_retries=0)
        msgs = [{"role": "user", "content": marker}]
        for turn in range(2):
            m = await a.messages.create(model="p", max_tokens=4, messages=msgs, extra_body={"seed": i * 10 + turn})
            msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                     {"role": "user", "content": f"{marker} turn {turn}"}]
    return marker, await proxy.close_session(s.id)


async def test_sixteen_sessions(proxy, tokenizer, hf_model):
    results = await asyncio.gather(*(one_session(proxy, i) for i in range(16)))
    assert len({rec.session_id for _, rec in results}) == 16
    for i, (marker, rec) in enumerate(results):
        text = tokenizer.decode(rec.token_ids)
        assert len(rec.branches) == 1 and rec.metadata == {"trial": i}
        assert rec.counters.extensions == 1 and rec.counters.rewrites == 0 and sum(rec.mask) == 8
        assert text.count(marker) == 2
        others = [f"session-{j}-marker" for j in range(16) if j != i]
        assert not any(o + "\n" in text or o + " " in text or o + "<" in text for o in others)
    for _, rec in results[:4]:  # batched decoding still matches a teacher-forced forward
        ref = teacher_forced(hf_model, rec.token_ids)
        assert max(abs(lp - ref[k]) for k, (lp, m) in enumerate(zip(rec.logprobs, rec.mask, strict=True)) if m) < 1e-4

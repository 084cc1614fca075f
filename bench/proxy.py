"""Added latency of the proxy over calling the ServerManager directly (tiny model, fixed generation).

    .venv/bin/python bench/proxy.py [--turns 4] [--gen 32] [--rounds 3] [--inprocess-client]

For 1 and 16 concurrent sessions, each session runs a multi-turn OpenAI conversation through the proxy
(HTTP + chat-template tokenization + accumulator) from a separate client process, as a sandboxed
scaffold would; the exact prompt ids each call sent to the manager are then replayed straight into
`manager.generate` at the same concurrency. Generation is greedy with `ignore_eos`, so both paths
decode the same number of tokens. Proxy and direct runs alternate after a warm-up, so both see a warm
prefix cache. A second table isolates the proxy's own cost against a manager that answers instantly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import aiohttp


# -- client side (a separate process) ----------------------------------------------------------
async def client_session(http, url: str, turns: int, gen: int, idx: int, lat: list[float]) -> str:
    async with http.post(url + "/sessions") as r:
        info = await r.json()
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Task {idx}: list the files and explain what they do."}]
    for t in range(turns):
        body = {"model": "p", "messages": msgs, "max_tokens": gen, "temperature": 0, "ignore_eos": True}
        t0 = time.perf_counter()
        async with http.post(info["openai_base_url"] + "/chat/completions", json=body) as r:
            reply = (await r.json())["choices"][0]["message"]
        lat.append(time.perf_counter() - t0)
        msgs += [reply, {"role": "user", "content": f"Observation {t}: ok. Continue."}]
    async with http.delete(f"{url}/sessions/{info['session_id']}") as r:
        await r.read()
    return info["session_id"]


async def client_run(url: str, conc: int, turns: int, gen: int) -> tuple[list[str], list[float]]:
    lat: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        sids = await asyncio.gather(*(client_session(http, url, turns, gen, i, lat) for i in range(conc)))
    return list(sids), lat


async def client_main(url: str, conc: int, turns: int, gen: int) -> None:
    sids, lat = await client_run(url, conc, turns, gen)
    print(json.dumps({"sids": sids, "lat": lat}))


async def run_client(url: str, conc: int, turns: int, gen: int, inprocess: bool) -> tuple[list[str], list[float]]:
    if inprocess:
        return await client_run(url, conc, turns, gen)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", url, str(conc), str(turns), str(gen), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    data = json.loads(out)
    return data["sids"], data["lat"]


# -- server side ---------------------------------------------------------------------------------
class Recorder:
    """Pass-through manager that keeps each session's prompts (for the direct replay)."""

    def __init__(self, inner):
        self.inner, self.prompts = inner, {}

    @property
    def weight_version(self):
        return self.inner.weight_version

    @property
    def max_model_len(self):
        return self.inner.max_model_len

    async def generate(self, req):
        self.prompts.setdefault(req.session_id, []).append((req.prompt_ids, req.sampling))
        return await self.inner.generate(req)

    async def prompt_logprobs(self, ids, session_id=None, temperature=1.0):
        return await self.inner.prompt_logprobs(ids, session_id, temperature)

    async def abort(self, rid):
        return await self.inner.abort(rid)

    def end_session(self, sid):
        self.inner.end_session(sid)


class Instant(Recorder):
    """Answers every call at once with `max_tokens` newlines: isolates the proxy's own cost."""

    max_model_len = 2048
    weight_version = 0

    async def generate(self, req):
        from legorl.serving.types import TokenOutput

        n = req.sampling.max_tokens
        return TokenOutput(req.request_id, len(req.prompt_ids), [198] * n, [-0.5] * n, "length", 0)

    def end_session(self, sid):
        return None


async def direct_session(manager, prompts, lat: list[float]) -> None:
    from legorl.serving.types import GenerateRequest

    for ids, sp in prompts:
        t0 = time.perf_counter()
        await manager.generate(GenerateRequest(list(ids), sp))
        lat.append(time.perf_counter() - t0)


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


async def measure(manager, tok, conc: int, args, direct: bool = True):
    from legorl.proxy import ProxyConfig, ProxyServer

    rec = manager if isinstance(manager, Instant) else Recorder(manager)
    proxy = ProxyServer(rec, tok, ProxyConfig(management_routes=True))
    await proxy.start()
    p_lat: list[float] = []
    d_lat: list[float] = []
    inproc = args.inprocess_client
    sids, _ = await run_client(proxy.url, conc, args.turns, args.gen, inproc)  # warm-up; its prompts are replayed
    rounds = args.rounds * (4 if conc == 1 else 1)  # enough single-session samples for a p99
    for _ in range(rounds):
        if direct:
            await asyncio.gather(*(direct_session(manager, rec.prompts[s], d_lat) for s in sids))
        p_lat += (await run_client(proxy.url, conc, args.turns, args.gen, inproc))[1]
    await proxy.close()
    return p_lat, d_lat


def row(conc: int, p: list[float], d: list[float]) -> str:
    out = [f"{conc:>5}"]
    for q in (50, 99):
        dp, pp = pct(d, q) * 1e3, pct(p, q) * 1e3
        out.append(f"{dp:9.2f} {pp:9.2f} {pp - dp:+8.2f} ms {100 * (pp - dp) / dp:+6.1f}%")
    return "  ".join(out) + f"   (n={len(p)})"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inprocess-client", action="store_true", help="run the HTTP client in this process (its CPU "
                    "cost then counts as proxy overhead)")
    args = ap.parse_args()
    from legorl.models.chat import load_tokenizer
    from legorl.models.store import resolve_model
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.manager import SingleReplicaManager

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=65536, seed=0)
    await engine.start()
    manager = SingleReplicaManager(engine, engine.max_model_len)
    print(f"model {args.model}; {args.turns} turns/session; {args.gen} generated tokens/call (greedy, ignore_eos); "
          f"{args.rounds} rounds; client {'in this' if args.inprocess_client else 'in a separate'} process")
    print(f"{'':7}{'p50':-^38}  {'p99':-^38}")
    print(f"{'conc':>5}  {'direct':>9} {'proxy':>9} {'overhead':>18}  {'direct':>9} {'proxy':>9} {'overhead':>18}")
    for conc in (1, 16):
        p, d = await measure(manager, tok, conc, args)
        print(row(conc, p, d))
    await engine.close()
    print("\nproxy's own cost, manager answering instantly (HTTP + validate + render + tokenize + parse + accumulate):")
    for conc in (1, 16):
        p, _ = await measure(Instant(None), tok, conc, args, direct=False)
        print(f"{conc:>5}  p50 {pct(p, 50) * 1e3:6.2f} ms   p99 {pct(p, 99) * 1e3:6.2f} ms   (n={len(p)})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        url, conc, turns, gen = sys.argv[2], *map(int, sys.argv[3:6])
        asyncio.run(client_main(url, conc, turns, gen))
    else:
        asyncio.run(main())

"""Added latency of the proxy over calling the ServerManager directly (tiny model, fixed generation).

    .venv/bin/python bench/proxy.py [--turns 4] [--gen 32] [--rounds 3]

For 1 and 16 concurrent sessions, each session runs a multi-turn OpenAI conversation through the proxy
(HTTP + chat-template tokenization + accumulator) from a separate client process, as a sandboxed
scaffold would; the exact prompt ids each call sent to the manager are then replayed straight into
`manager.generate` at the same concurrency. Generation is greedy with `ignore_eos`, so both paths
decode the same number of tokens. After a warm-up, each turn runs directly and then through the proxy,
back to back, so both see a warm prefix cache and the same machine load; "paired median Δ" is the
median over calls of (proxy - direct) for the same call. Then: the time spent inside the proxy per
call (its Server-Timing header), and a round trip against a manager that answers instantly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import aiohttp


# -- client side (a separate process, driven one turn at a time over stdin/stdout) ---------------
async def client_main(url: str, conc: int, gen: int) -> None:
    """Open `conc` sessions; on each stdin line run one turn of every session at once and print the
    latencies; on EOF close the sessions and print their ids."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        infos = []
        for _ in range(conc):
            async with http.post(url + "/sessions") as r:
                infos.append(await r.json())
        hist = [[{"role": "system", "content": "You are a coding agent."},
                 {"role": "user", "content": f"Task {i}: list the files and explain what they do."}]
                for i in range(conc)]

        async def turn(i: int, t: int) -> tuple[float, float]:
            body = {"model": "p", "messages": hist[i], "max_tokens": gen, "temperature": 0, "ignore_eos": True}
            t0 = time.perf_counter()
            async with http.post(infos[i]["openai_base_url"] + "/chat/completions", json=body) as r:
                reply = (await r.json())["choices"][0]["message"]
                timing = dict(part.strip().split(";dur=") for part in r.headers["Server-Timing"].split(","))
            dt = time.perf_counter() - t0
            hist[i] += [reply, {"role": "user", "content": f"Observation {t}: ok. Continue."}]
            return dt, float(timing["proxy"]) / 1e3

        t = 0
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(json.dumps(await asyncio.gather(*(turn(i, t) for i in range(conc)))), flush=True)
            t += 1
        for info in infos:
            async with http.delete(f"{url}/sessions/{info['session_id']}") as r:
                await r.read()
    print(json.dumps([info["session_id"] for info in infos]), flush=True)


class Client:
    def __init__(self, url: str, conc: int, gen: int):
        self.args = (url, str(conc), str(gen))

    async def __aenter__(self) -> Client:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", *self.args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        return self

    async def turn(self) -> list[list[float]]:
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()
        return json.loads(await self.proc.stdout.readline())

    async def __aexit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.sids = json.loads(await self.proc.stdout.readline())
        await self.proc.wait()


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


async def direct_call(manager, prompt) -> float:
    from legorl.serving.types import GenerateRequest

    ids, sp = prompt
    t0 = time.perf_counter()
    await manager.generate(GenerateRequest(list(ids), sp))
    return time.perf_counter() - t0


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


async def measure(manager, tok, conc: int, args, direct: bool = True):
    """Warm-up run (records the prompts), then rounds where each turn runs directly and through the
    proxy back to back, so both see the same machine load."""
    from legorl.proxy import ProxyConfig, ProxyServer

    rec = manager if isinstance(manager, Instant) else Recorder(manager)
    proxy = ProxyServer(rec, tok, ProxyConfig(management_routes=True))
    await proxy.start()
    p_lat: list[float] = []
    d_lat: list[float] = []
    inside: list[float] = []  # server-side proxy time per call (Server-Timing), engine wait excluded
    async with Client(proxy.url, conc, args.gen) as warm:
        for _ in range(args.turns):
            await warm.turn()
    prompts = [rec.prompts.get(sid, []) for sid in warm.sids]
    rounds = args.rounds * (4 if conc == 1 else 1)  # enough single-session samples for a p99
    for _ in range(rounds):
        async with Client(proxy.url, conc, args.gen) as client:
            for t in range(args.turns):
                if direct:
                    d_lat += await asyncio.gather(*(direct_call(manager, p[t]) for p in prompts))
                for lat, own in await client.turn():
                    p_lat.append(lat)
                    inside.append(own)
    await proxy.close()
    return p_lat, d_lat, inside


def row(conc: int, p: list[float], d: list[float]) -> str:
    out = [f"{conc:>5}"]
    for q in (50, 99):
        dp, pp = pct(d, q) * 1e3, pct(p, q) * 1e3
        out.append(f"{dp:9.2f} {pp:9.2f} {pp - dp:+8.2f} ms {100 * (pp - dp) / dp:+6.1f}%")
    paired = statistics.median(b - a for a, b in zip(d, p, strict=True)) * 1e3  # same call, back to back
    return "  ".join(out) + f"  {paired:+8.2f} ms   (n={len(p)})"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
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
          f"{args.rounds} rounds; client in a separate process")
    print(f"{'':7}{'p50':-^38}  {'p99':-^38}  {'paired':>10}")
    print(f"{'conc':>5}  {'direct':>9} {'proxy':>9} {'overhead':>18}  {'direct':>9} {'proxy':>9} {'overhead':>18}"
          f"  {'median Δ':>10}")
    inside = {}
    for conc in (1, 16):
        p, d, inside[conc] = await measure(manager, tok, conc, args)
        print(row(conc, p, d))
    await engine.close()
    print("\ntime inside the proxy per call (server side, engine wait excluded; from Server-Timing):")
    for conc in (1, 16):
        xs = inside[conc]
        print(f"{conc:>5}  p50 {pct(xs, 50) * 1e3:6.2f} ms   p99 {pct(xs, 99) * 1e3:6.2f} ms")
    print("\nround trip through the proxy with a manager that answers instantly (client + HTTP + proxy):")
    for conc in (1, 16):
        p, _, _ = await measure(Instant(None), tok, conc, args, direct=False)
        print(f"{conc:>5}  p50 {pct(p, 50) * 1e3:6.2f} ms   p99 {pct(p, 99) * 1e3:6.2f} ms   (n={len(p)})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        asyncio.run(client_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    else:
        asyncio.run(main())

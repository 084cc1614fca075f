"""Time to first token of a streamed call through `legorl serve`, buffered (before) vs token-streamed.

    .venv/bin/python bench/ttft.py [--model smollm2-135m-instruct] [--gen 64] [--rounds 2]
                                   [--before-rev 18786b7]

Starts two `legorl serve`: from the source tree at `--before-rev` (exported with `git archive`; the
default is the last commit before streaming, whose proxy wrote every event after the generation) and
from this checkout. The official `openai` / `anthropic` clients stream a `--gen`-token greedy call
(`ignore_eos`) for chat completions, the Responses API and Anthropic messages, alternating between the
two servers call by call (one decodes at a time, both see the same machine load), after one warm-up
call per API and server. TTFT is when the first non-empty text delta reaches the client; total is when
the stream ends. Medians over `--rounds`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai

ROOT = Path(__file__).resolve().parents[1]
APIS = ("chat", "responses", "messages")
PROMPT = "Write a long story about a robot who learns to paint."


def export_src(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def deltas(api: str, base: str, gen: int) -> Iterator[str]:
    body = {"ignore_eos": True}
    if api == "chat":
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        for chunk in c.chat.completions.create(model="p", messages=[{"role": "user", "content": PROMPT}],
                                               max_tokens=gen, temperature=0, stream=True, extra_body=body):
            if chunk.choices:
                yield chunk.choices[0].delta.content or ""
    elif api == "responses":
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        for ev in c.responses.create(model="p", input=PROMPT, max_output_tokens=gen, temperature=0, stream=True,
                                     extra_body=body):
            if ev.type == "response.output_text.delta":
                yield ev.delta
    else:
        a = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
        with a.messages.stream(model="p", max_tokens=gen, messages=[{"role": "user", "content": PROMPT}],
                               extra_body={**body, "temperature": 0}) as s:
            yield from s.text_stream


def one_call(api: str, base: str, gen: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = None
    for piece in deltas(api, base, gen):
        if piece and first is None:
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return (first if first is not None else total), total


def start(src: Path, model: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "legorl.cli", "serve", "--model", model]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(src)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    url = proc.stdout.readline().split(" on ")[-1].strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"legorl serve from {src} did not start")
    return proc, url


def measure(urls: dict[str, str], args: argparse.Namespace) -> dict[str, dict[str, tuple[float, float]]]:
    """Calls alternate between the servers (same load for both); one server decodes at a time."""
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {k: {a: [] for a in APIS} for k in urls}
    for api in APIS:
        for url in urls.values():
            one_call(api, url, 4)  # warm-up
    for _ in range(args.rounds):
        for api in APIS:
            for k, url in urls.items():
                runs[k][api].append(one_call(api, url, args.gen))
    return {k: {a: (statistics.median(r[0] for r in v[a]), statistics.median(r[1] for r in v[a])) for a in APIS}
            for k, v in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-rev", default="18786b7", help="a commit whose proxy buffered its streams")
    args = ap.parse_args()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for src in (export_src(args.before_rev, Path(tmp)), ROOT / "src"):
                procs.append(start(src, args.model))
            res = measure({"before": procs[0][1], "after": procs[1][1]}, args)
        finally:
            for proc, _ in procs:
                proc.terminate()
                proc.wait(30)
    before, after = res["before"], res["after"]
    print(f"streamed {args.gen}-token greedy call through `legorl serve --model {args.model}` "
          f"(median of {args.rounds}; seconds)")
    print(f"{'api':<10} {'before ttft':>11} {'before total':>12} {'after ttft':>10} {'after total':>11} "
          f"{'ttft after/before':>17} {'after ttft/total':>16}")
    for api in APIS:
        (bt, btot), (at, atot) = before[api], after[api]
        print(f"{api:<10} {bt:>11.2f} {btot:>12.2f} {at:>10.2f} {atot:>11.2f} {at / bt:>17.3f} {at / atot:>16.3f}")


if __name__ == "__main__":
    main()

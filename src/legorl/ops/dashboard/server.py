"""`legorl dashboard`: an aiohttp app over run dirs. The page polls JSON endpoints; nothing is cached
beyond the tokenizer, so a live run shows up as its files grow.

    GET /                              the page (static/index.html; charts are static/chart.js, no CDN)
    GET /api/runs                      one summary per run under RUNS_DIR
    GET /api/runs/{run}                summary + resolved config
    GET /api/runs/{run}/metrics        the step records (JSONL)
    GET /api/runs/{run}/trials         compact result.json rows (step, trial, task, outcome, reward, ...)
    GET /api/runs/{run}/trajectory?trial=step_1/<trial_id>   turns + tokens (text, mask, logprob)
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from legorl.ops.runs import Run, find_runs, summary

STATIC = Path(__file__).parent / "static"
TRIAL_FIELDS = ("trial_id", "task_id", "attempt", "step", "reward", "outcome", "reason", "turns", "tokens",
                "policy_tokens", "duration_s")


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: turn them into null so the browser's JSON.parse accepts the payload."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _json(data: Any) -> web.Response:
    return web.json_response(_clean(data), dumps=partial(json.dumps, default=str))


def _load_decoder(spec: str) -> Callable[[int], str] | None:
    """id -> text for the model's tokenizer: tokenizer.json via `tokenizers` (fast to load), else the
    HF tokenizer; None when the model is not on this disk."""
    try:
        from legorl.models import resolve_model

        model_dir = resolve_model(spec, prepare=False)
    except Exception:
        return None
    try:
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        return lambda i: fast.decode([i], skip_special_tokens=False)
    except Exception:
        pass
    try:
        from legorl.models.chat import load_tokenizer

        hf = load_tokenizer(model_dir)
        return lambda i: hf.decode([i])
    except Exception:
        return None


class Dashboard:
    def __init__(self, runs_dir: str | Path, decode_tokens: bool = True):
        self.runs_dir = Path(runs_dir)
        self.decode_tokens = decode_tokens
        self._tokenizers: dict[str, Any] = {}

    def runs(self) -> dict[str, Run]:
        return {r.root.name: r for r in find_runs(self.runs_dir)}

    def run(self, request: web.Request) -> Run:
        run = self.runs().get(request.match_info["run"])
        if run is None:
            raise web.HTTPNotFound(text=f"no run {request.match_info['run']!r} under {self.runs_dir}")
        return run

    async def index(self, _request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def list_runs(self, _request: web.Request) -> web.Response:
        rows = await asyncio.to_thread(lambda: [{"id": k, **summary(r)} for k, r in self.runs().items()])
        return _json(rows)

    async def run_info(self, request: web.Request) -> web.Response:
        run = self.run(request)
        return _json(await asyncio.to_thread(lambda: {**summary(run), "config": run.config}))

    async def metrics(self, request: web.Request) -> web.Response:
        run = self.run(request)
        return _json(await asyncio.to_thread(run.metrics))

    async def trials(self, request: web.Request) -> web.Response:
        run = self.run(request)

        def rows() -> list[dict[str, Any]]:
            out = []
            for t in run.trials():
                row = {k: t.get(k) for k in TRIAL_FIELDS}
                row["path"] = str(Path(t["_dir"]).relative_to(run.trials_dir))
                row["kind"] = "val" if str(t.get("trial_id", "")).startswith("val_") else "train"
                row["sandbox_start"] = (t.get("timings") or {}).get("sandbox_start")
                out.append(row)
            return out

        return _json(await asyncio.to_thread(rows))

    async def trajectory(self, request: web.Request) -> web.Response:
        run = self.run(request)
        rel = request.query.get("trial", "")
        base = run.trials_dir.resolve()
        tdir = (base / rel).resolve()
        if not rel or base not in tdir.parents:
            raise web.HTTPBadRequest(text="trial must be step_<n>/<trial_id> inside the run's trials dir")
        if not (tdir / "proxy_trajectory.json").is_file():
            raise web.HTTPNotFound(text=f"{rel}: no proxy_trajectory.json")
        return _json(await asyncio.to_thread(self._trajectory, run, tdir))

    def _tokenizer(self, run: Run) -> Any:
        """The run model's tokenizer, or None (ids are shown instead) when it is not on this disk."""
        spec = (run.config.get("model") or {}).get("path")
        if not self.decode_tokens or not spec:
            return None
        if spec not in self._tokenizers:
            self._tokenizers[spec] = _load_decoder(spec)
        return self._tokenizers[spec]

    def _trajectory(self, run: Run, tdir: Path) -> dict[str, Any]:
        data = json.loads((tdir / "proxy_trajectory.json").read_text())
        result = None
        if (tdir / "result.json").is_file():
            result = json.loads((tdir / "result.json").read_text())
        branch = (data.get("branches") or [{}])[0]
        ids = branch.get("token_ids") or []
        mask = branch.get("mask") or [0] * len(ids)
        logprobs = branch.get("logprobs") or [None] * len(ids)
        tok = self._tokenizer(run)
        texts = [tok(i) for i in ids] if tok is not None else None
        tokens = [{"id": i, "text": texts[n] if texts else None, "mask": mask[n] if n < len(mask) else 0,
                   "logprob": logprobs[n] if n < len(logprobs) else None} for n, i in enumerate(ids)]
        return {
            "trial": str(tdir.relative_to(run.trials_dir.resolve())),
            "decoded": texts is not None,
            "messages": branch.get("messages") or [],
            "tools": branch.get("tools") or [],
            "tokens": tokens,
            "num_branches": len(data.get("branches") or []),
            "counters": data.get("counters") or {},
            "result": result,
        }


async def _no_content(_request: web.Request) -> web.Response:
    return web.Response(status=204)


def make_app(runs_dir: str | Path, decode_tokens: bool = True) -> web.Application:
    d = Dashboard(runs_dir, decode_tokens)
    app = web.Application()
    app.router.add_get("/", d.index)
    app.router.add_get("/favicon.ico", _no_content)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/runs", d.list_runs)
    app.router.add_get("/api/runs/{run}", d.run_info)
    app.router.add_get("/api/runs/{run}/metrics", d.metrics)
    app.router.add_get("/api/runs/{run}/trials", d.trials)
    app.router.add_get("/api/runs/{run}/trajectory", d.trajectory)
    return app


async def start(runs_dir: str | Path, host: str = "127.0.0.1", port: int = 0,
                decode_tokens: bool = True) -> tuple[web.AppRunner, str]:
    """Start serving in the current loop; returns (runner, url). `runner.cleanup()` stops it."""
    runner = web.AppRunner(make_app(runs_dir, decode_tokens), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    bound_port = sock.getsockname()[1]
    return runner, f"http://{host}:{bound_port}/"


def serve(runs_dir: str | Path, host: str = "127.0.0.1", port: int = 8265,
          echo: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C."""

    async def main() -> None:
        runner, url = await start(runs_dir, host, port)
        echo(f"legorl dashboard on {url} over {Path(runs_dir).resolve()} (Ctrl-C to stop)")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass

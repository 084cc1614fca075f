"""`legorl serve`: an engine (embedded, or a vLLM server) + the proxy as a standalone server
(torch is imported lazily)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from pathlib import Path
from typing import Any

import typer


class AdapterLoadError(ValueError):
    """An `--adapter` the engine cannot hold (modules or shapes of another model): the CLI says it in one line."""


async def run_server(
    model: str,
    host: str = "127.0.0.1",
    port: int = 0,
    trajectories: Path | None = None,
    tool_parser: str = "hermes",
    kv_budget_tokens: int = 65536,
    ready: asyncio.Future | None = None,
    stop: asyncio.Event | None = None,
    engine_kind: str = "embedded",
    limits: Any | None = None,
    freeze_gc: bool = False,
    vllm: Any | None = None,
    adapters: dict[str, Path] | None = None,
    engine_api: bool = False,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM); closing writes every open session's trajectory.
    `limits`: a `[serving.proxy]` section (`ProxySection`); None: its defaults. `freeze_gc` (the CLI's
    own process only): what start-up allocated leaves the collector's generations, so a full collection
    set off by a large request walks only the objects made since (10 MB bodies: /health max 281 -> 39 ms).
    `vllm`: a `[serving.vllm]` section (`VLLMSection`) for `engine_kind="vllm"`, e.g. `urls` to attach to a
    server already running (the tests share one); None: its defaults (legorl starts the server).
    `adapters`: named LoRA adapters (PEFT dirs) over the base, picked by a request's `model`. `engine_api`: serve
    /engine/* so `legorl train` runs with `serving.engine = "remote"` share this server (docs/lora.md)."""
    from legorl.config.serving import ProxySection
    from legorl.models.store import resolve_model
    from legorl.proxy.config import ProxyConfig
    from legorl.runtime.stack import PolicyServer
    from legorl.serving.adapter import read_peft_adapter
    from legorl.serving.launch import EngineSpec

    path = resolve_model(model)
    loaded = {name: read_peft_adapter(d) for name, d in (adapters or {}).items()}  # bad dirs fail before loading
    if loaded and engine_kind != "embedded":
        raise ValueError("--adapter needs the embedded engine (vLLM adapters are not wired up yet)")
    config = ProxyConfig.from_section(
        limits or ProxySection(), host=host, port=port, tool_parser=tool_parser, model_name=Path(str(model)).name,
        trajectories_dir=trajectories, management_routes=True, bare_routes=True,
    )
    spec = EngineSpec(path, kind=engine_kind, kv_budget_tokens=kv_budget_tokens)
    if vllm is not None:
        spec.vllm = vllm
    server = await PolicyServer.start(spec, config, engine_api=engine_api)
    try:
        for name, state in loaded.items():
            if name == config.model_name:
                raise AdapterLoadError(f"--adapter {name}: that is the base model's name; pick another")
            for e in server.engines:
                try:
                    await e.load_adapter(name, state, 0)  # type: ignore[attr-defined]
                except ValueError as exc:
                    raise AdapterLoadError(f"--adapter {name}: {exc} (an adapter of another base model?)") from exc
    except BaseException:
        await server.close()
        raise
    if freeze_gc:
        gc.freeze()
    proxy = server.proxy
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
            pass
    try:
        print(f"legorl serve: model {model} ({engine_kind} engine) on {proxy.url}", flush=True)
        print(f"  sessions:  POST {proxy.url}/sessions  ->  session_id, openai_base_url, anthropic_base_url",
              flush=True)
        print(f"  OpenAI:    {proxy.url}/v1   (X-Session-ID header, or a new session per request)", flush=True)
        print(f"  Anthropic: {proxy.url}      (same)", flush=True)
        if loaded:
            print(f"  models:    {', '.join(proxy.models.names())}  (a request's `model` picks one)", flush=True)
        if engine_api:
            print(f"  engine API: {proxy.url}/engine  (training runs: serving.engine='remote', "
                  f"serving.remote.url='{proxy.url}')", flush=True)
        if ready is not None and not ready.done():
            ready.set_result(proxy.url)
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.close()
        print("legorl serve: stopped", flush=True)


def register(app: Any) -> None:
    @app.command("serve")
    def serve(
        model: str = typer.Option("smollm2-135m-instruct", "--model", help="registered name or HF model dir"),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(0, "--port", help="0: pick a free port"),
        trajectories: Path | None = typer.Option(None, "--trajectories", help="write <DIR>/<session>/proxy_trajectory.json"),
        tool_parser: str = typer.Option("hermes", "--tool-parser"),
        kv_budget_tokens: int = typer.Option(65536, "--kv-budget-tokens", help="embedded engine's KV budget"),
        engine: str = typer.Option("embedded", "--engine", help="embedded, or vllm (a vLLM server legorl starts, "
                                   "or the servers --config's serving.vllm.urls names)"),
        config: Path | None = typer.Option(None, "--config", help="a run config TOML: its [serving.proxy] limits, "
                                           "[serving.adapters], and with --engine vllm its [serving.vllm] (`urls` "
                                           "attach running servers instead of starting one)"),
        max_sessions: int | None = typer.Option(None, "--max-sessions", help="open sessions before a 429"),
        session_idle_ttl: float | None = typer.Option(None, "--session-idle-ttl", help="close idle sessions (s)"),
        default_max_tokens: int | None = typer.Option(None, "--default-max-tokens", help="cap of calls without one"),
        adapter: list[str] = typer.Option([], "--adapter", help="NAME=DIR: a LoRA adapter (PEFT dir, as `legorl "
                                          "export` writes) served as model NAME; repeatable"),
        engine_api: bool = typer.Option(False, "--engine-api", help="serve /engine/* so `legorl train` runs with "
                                        "serving.engine='remote' share this server"),
    ) -> None:
        """Run an engine (embedded or vLLM) behind the OpenAI / Anthropic proxy until Ctrl-C."""
        serving = _serving(config)
        limits = _limits(serving, max_sessions=max_sessions, session_idle_ttl_sec=session_idle_ttl,
                         default_max_tokens=default_max_tokens)
        adapters = _adapters(serving, adapter, Path(str(model)).name)
        from legorl.proxy.parsers import available_parsers

        if tool_parser not in available_parsers():
            raise typer.BadParameter(f"unknown tool parser; available: {', '.join(available_parsers())}")
        from legorl.serving.launch import ENGINE_KINDS

        if engine not in ENGINE_KINDS:
            raise typer.BadParameter(f"unknown engine {engine!r}; use one of {', '.join(ENGINE_KINDS)}")
        if adapters and engine != "embedded":
            raise typer.BadParameter("--adapter needs --engine embedded (vLLM adapters are not wired up yet)")
        try:
            asyncio.run(run_server(model, host, port, trajectories, tool_parser, kv_budget_tokens, engine_kind=engine,
                                   limits=limits, freeze_gc=os.environ.get("LEGORL_GC_FREEZE", "1") == "1",
                                   adapters=adapters, engine_api=engine_api,
                                   vllm=serving.vllm if engine == "vllm" else None))
        except AdapterLoadError as exc:
            raise typer.BadParameter(str(exc)) from exc


def _serving(config: Path | None) -> Any:
    """The `[serving]` section of the run config `config` (its defaults without one), read once; a bad config is
    refused in one line."""
    from pydantic import ValidationError

    from legorl.config import ConfigError, load_config
    from legorl.config.serving import ServingSection

    try:
        return load_config(config).serving if config is not None else ServingSection()
    except (ConfigError, ValidationError) as exc:
        raise typer.BadParameter(str(exc)) from exc


def _adapters(serving: Any, flags: list[str], base: str) -> dict[str, Path]:
    """`serving.adapters`, then `--adapter NAME=DIR` flags on top; each dir checked here."""
    from legorl.serving.adapter import read_peft_adapter

    out: dict[str, Path] = {k: Path(v) for k, v in serving.adapters.items()}
    for flag in flags:
        name, sep, d = flag.partition("=")
        if not sep or not name or not d:
            raise typer.BadParameter(f"--adapter {flag!r}: use NAME=DIR")
        out[name] = Path(d)
    for name, d in out.items():
        if name == base:
            raise typer.BadParameter(f"--adapter {name}: that is the base model's name; pick another")
        try:
            read_peft_adapter(d)
        except (ValueError, OSError) as exc:
            raise typer.BadParameter(f"--adapter {name}: {exc}") from exc
    return out


def _limits(serving: Any, **flags: Any) -> Any:
    """`serving.proxy`, with the flags that were given on top."""
    from pydantic import ValidationError

    section = serving.proxy
    try:
        for key, value in flags.items():
            if value is not None:
                setattr(section, key, value)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return section

"""Preflight checks that read the model directory: path, tool parser × chat template × scaffold, R3.

They read `config.json` and the chat template as plain files (no tokenizer, no weights), so a check
costs milliseconds; only the R3 check imports `legorl.models.moe` (and with it torch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from legorl.config import RunConfig
from legorl.ops import hardware
from legorl.ops.checks import CheckResult, fatal, ok, skip, warn

# Scaffolds that never call the model, and scaffolds that speak a text protocol (no tool schemas).
NO_MODEL_SCAFFOLDS = frozenset({"nop", "oracle"})
TEXT_SCAFFOLDS = frozenset({"mini-swe-agent", "mini_swe", "mini-swe", "terminus"})

# How a chat template writes an assistant tool call -> the name of the parser that reads it.
# Order matters: Qwen3-Coder wraps its XML calls in <tool_call> too.
TEMPLATE_CALL_FORMATS: list[tuple[str, str]] = [
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
    ("<｜tool▁calls▁begin｜>", "deepseek_v3"),
    ("<|tool_call|>", "granite"),
]


def model_dir_for(cfg: RunConfig) -> Path | None:
    """The prepared model directory, or None when it is not on this disk (yet)."""
    from legorl.models import ModelNotFoundError, resolve_model

    try:
        return resolve_model(cfg.model.path, prepare=False)
    except ModelNotFoundError:
        return None


def check_model_path(cfg: RunConfig, structure_only: bool = False) -> list[CheckResult]:
    from legorl.models import ModelNotFoundError, resolve_model
    from legorl.models.store import REGISTRY

    spec = cfg.model.path
    if structure_only:
        if spec in REGISTRY:
            return [ok("paths", f"model {spec!r} is a registered name")]
        return [skip("paths", f"model {spec!r}: not checked on this disk (--structure-only)")]
    try:
        path = resolve_model(spec, prepare=False)
    except ModelNotFoundError as exc:
        if spec in REGISTRY:
            return [warn("paths", f"model {spec!r} is registered but not prepared yet",
                         f"`legorl models prepare {spec}` now, or the run prepares it at start")]
        return [fatal("paths", str(exc), "set model.path to a HF model dir or a registered name")]
    return [ok("paths", f"model {spec!r} -> {path}")]


def read_chat_template(model_dir: Path) -> str | None:
    """The template text from chat_template.jinja or tokenizer_config.json (prefers 'tool_use')."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    tc = model_dir / "tokenizer_config.json"
    if not tc.is_file():
        return None
    tpl: Any = json.loads(tc.read_text()).get("chat_template")
    if isinstance(tpl, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("tool_use") or named.get("default") or next(iter(named.values()), None)
    return tpl if isinstance(tpl, str) else None


def template_call_format(template: str) -> str | None:
    """The tool-call format a template renders, or None when it has no native tool support.

    'unknown' when it renders tools but in no format listed in TEMPLATE_CALL_FORMATS."""
    if not re.search(r"\btools\b", template):
        return None
    for marker, fmt in TEMPLATE_CALL_FORMATS:
        if marker in template:
            return fmt
    return "unknown"


def scaffold_tool_mode(agent: str, kwargs: dict[str, Any]) -> str:
    """'none' (never calls the model), 'text' (fenced commands) or 'tools' (tool schemas).

    `agent`, `kwargs`: the config's `agent.name` and `agent.kwargs`."""
    if agent in NO_MODEL_SCAFFOLDS:
        return "none"
    if agent in TEXT_SCAFFOLDS or kwargs.get("tools") in (False, []):  # builtin: a list names the tools
        return "text"
    return "tools"


def check_tool_parser(cfg: RunConfig, model_dir: Path | None, structure_only: bool = False) -> list[CheckResult]:
    """A parser that cannot read the format the template teaches the model means zero tool calls."""
    from legorl.proxy.parsers import available_parsers

    a, name = cfg.agent, "tool-parser"
    parser = a.tool_parser
    if parser not in available_parsers():
        return [fatal(name, f"unknown agent.tool_parser={parser!r}",
                      f"use one of {', '.join(available_parsers())}")]
    mode = scaffold_tool_mode(a.name, a.kwargs)
    if mode == "none":
        return [ok(name, f"scaffold {a.name!r} does not call the model; parser unused")]
    if mode == "text":
        return [ok(name, f"scaffold {a.name!r} uses a text protocol (no tool schemas); parser {parser!r} unused")]
    if structure_only or model_dir is None:
        why = "--structure-only" if structure_only else "model not on this disk"
        return [skip(name, f"parser {parser!r} vs the model's chat template not checked ({why})")]
    template = read_chat_template(model_dir)
    if template is None:
        return [fatal(name, f"{model_dir}: no chat template", "use a chat/instruct model")]
    fmt = template_call_format(template)
    if fmt is None:
        return [ok(name, f"template has no native tools: the proxy injects {parser!r} instructions "
                         f"and parses them back (scaffold {a.name!r})")]
    if fmt == parser:
        return [ok(name, f"template writes {fmt!r} tool calls; parser {parser!r} reads them")]
    if fmt == "unknown":
        return [warn(name, f"template renders tools in a format preflight does not recognize; "
                           f"parser {parser!r} may miss every call",
                     "run one trial and check result.json counters.tool_calls > 0")]
    fix = (f"set agent.tool_parser={fmt!r}" if fmt in available_parsers()
           else f"no {fmt!r} parser is registered: add one under legorl/proxy/parsers/")
    return [fatal(name, f"the chat template writes {fmt!r} tool calls but agent.tool_parser={parser!r} "
                        f"cannot parse them: every trial would make zero tool calls", fix)]


def read_model_config(model_dir: Path) -> dict[str, Any]:
    data = json.loads((model_dir / "config.json").read_text())
    text = data.get("text_config")  # multimodal wrappers keep the LM's fields here
    return {**text, **data} if isinstance(text, dict) else data


def check_r3(cfg: RunConfig, model_dir: Path | None, structure_only: bool = False) -> list[CheckResult]:
    """R3 replays MoE routing; on a dense model there is nothing to replay (and the trainer refuses)."""
    name, want = "r3", cfg.model.enable_r3
    if structure_only or model_dir is None:
        return [skip(name, "model.enable_r3 vs dense/MoE not checked (model config not read)")]
    from legorl.models.moe import is_moe

    mcfg = read_model_config(model_dir)
    moe = is_moe(SimpleNamespace(**mcfg))
    kind = "MoE" if moe else "dense"
    out: list[CheckResult] = []
    if want and not moe:
        out.append(fatal(name, "model.enable_r3=true but the model is dense (no experts to replay)",
                         "drop model.enable_r3 (auto) or set it false"))
    elif moe and want is False:
        out.append(warn(name, "MoE model with R3 off: sampler and trainer may route tokens to different "
                              "experts, which shows up as logprob disagreement",
                        "drop model.enable_r3 (auto: on for MoE)"))
    else:
        out.append(ok(name, f"{kind} model, R3 {'on' if (moe if want is None else want) else 'off'}"))
    if cfg.serving.engine == "vllm" and moe and want is not False and hardware.count_gpus() == 0:
        out.append(fatal(name, "R3 with vLLM needs routed experts from vLLM's Model Runner V2, which needs "
                               "Triton on a GPU: vLLM's CPU build cannot return them",
                         "on CPU use serving.engine='embedded' for MoE, or set model.enable_r3=false"))
    ctx = mcfg.get("max_position_embeddings")
    need = cfg.rollout.max_prompt_len + cfg.rollout.max_response_len
    if isinstance(ctx, int) and need > ctx:
        out.append(warn("context", f"max_prompt_len + max_response_len = {need} > the model's "
                                   f"max_position_embeddings {ctx}", "lower rollout.max_prompt_len"))
    return out

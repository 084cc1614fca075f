"""Each preflight check fires on a config built to trip it (and stays quiet on the demo)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.env.base import ExecResult
from legorl.ops import hardware
from legorl.ops import preflight as pf
from legorl.ops.checks import format_results, has_fatal
from legorl.ops.preflight_model import check_r3, check_tool_parser, template_call_format

ROOT = Path(__file__).resolve().parents[2]


def cfg(**sections: dict) -> RunConfig:
    return RunConfig.model_validate(sections)


def levels(results, check: str | None = None) -> list[str]:
    return [r.level for r in results if check is None or r.check == check]


def fake_model(tmp_path: Path, template: str, **config) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "x", **config}))
    (d / "chat_template.jinja").write_text(template)
    return d


HERMES_TPL = "{% if tools %}{{ tools | tojson }}{% endif %}<tool_call>{{ call | tojson }}</tool_call>"
QWEN_CODER_TPL = "{% if tools %}x{% endif %}<tool_call>\n<function={{ name }}>\n<parameter=a>1</parameter>"
PLAIN_TPL = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"


def test_template_formats():
    assert template_call_format(PLAIN_TPL) is None
    assert template_call_format(HERMES_TPL) == "hermes"
    assert template_call_format(QWEN_CODER_TPL) == "qwen3_coder"
    assert template_call_format("{% if tools %}[TOOL_CALLS]{% endif %}") == "mistral"
    assert template_call_format("{% if tools %}<<call>>{% endif %}") == "unknown"


def test_parser_template_mismatch_is_fatal(tmp_path):
    d = fake_model(tmp_path, QWEN_CODER_TPL)
    res = check_tool_parser(cfg(agent={"tool_parser": "hermes"}), d)
    assert levels(res) == ["FATAL"] and "qwen3_coder" in res[0].fix
    assert levels(check_tool_parser(cfg(agent={"tool_parser": "qwen3_coder"}), d)) == ["PASS"]
    (tmp_path / "m").mkdir()
    mistral = fake_model(tmp_path / "m", "{% if tools %}[TOOL_CALLS]{% endif %}")
    res = check_tool_parser(cfg(), mistral)
    assert levels(res) == ["FATAL"] and "no 'mistral' parser" in res[0].fix


def test_parser_without_native_tools_is_fine(tmp_path, smollm_dir):
    # SmolLM2's template has no tools: the proxy injects the hermes format itself
    assert levels(check_tool_parser(cfg(), smollm_dir)) == ["PASS"]
    assert levels(check_tool_parser(cfg(agent={"tool_parser": "nope"}), smollm_dir)) == ["FATAL"]
    # text-protocol and model-less scaffolds never need the parser
    d = fake_model(tmp_path, QWEN_CODER_TPL)
    assert levels(check_tool_parser(cfg(agent={"kwargs": {"tools": False}}), d)) == ["PASS"]
    assert levels(check_tool_parser(cfg(agent={"name": "nop"}), d)) == ["PASS"]
    assert levels(check_tool_parser(cfg(), d, structure_only=True)) == ["SKIP"]


def test_r3(tmp_path, monkeypatch):
    dense = fake_model(tmp_path, PLAIN_TPL, max_position_embeddings=512)
    assert levels(check_r3(cfg(model={"enable_r3": True}), dense), "r3") == ["FATAL"]
    assert levels(check_r3(cfg(), dense), "r3") == ["PASS"]
    # context window smaller than prompt + response
    assert levels(check_r3(cfg(), dense), "context") == ["WARN"]
    (tmp_path / "moe").mkdir()
    moe = fake_model(tmp_path / "moe", PLAIN_TPL, num_local_experts=4)
    assert levels(check_r3(cfg(model={"enable_r3": False}), moe)) == ["WARN"]
    assert levels(check_r3(cfg(), moe)) == ["PASS"]
    # vLLM's CPU build cannot return routed experts (Model Runner V2 needs Triton on a GPU)
    monkeypatch.setattr(hardware, "count_gpus", lambda: 0)
    assert levels(check_r3(cfg(serving={"engine": "vllm"}), moe)) == ["PASS", "FATAL"]
    assert levels(check_r3(cfg(serving={"engine": "vllm"}, model={"enable_r3": False}), moe)) == ["WARN"]
    monkeypatch.setattr(hardware, "count_gpus", lambda: 1)
    assert levels(check_r3(cfg(serving={"engine": "vllm"}), moe)) == ["PASS"]


def test_batch_raw_and_dict():
    res = pf.run_preflight({"algorithm": {"adv_estimator": "rloo", "n_resp_per_prompt": 1}})
    assert [r.check for r in res] == ["batch"] and has_fatal(res)
    res = pf.run_preflight_dict({"trainer": {"lr": -1}})
    assert levels(res, "config") == ["FATAL"]
    assert levels(pf.check_batch(cfg(trainer={"micro_batch_size": 64})), "batch") == ["PASS", "WARN"]
    assert "WARN" in levels(pf.check_batch(cfg(rollout={"temperature": 0.0})))


def test_topology():
    urls = [f"http://127.0.0.1:{8000 + i}" for i in range(4)]  # attached: no local vLLM install needed
    c = cfg(rollout={"concurrency": 8}, serving={"engine": "vllm", "n_replicas": 4, "vllm": {"urls": urls}})
    assert "FATAL" in levels(pf.check_topology(c, cores=8, gpus=2))
    assert "FATAL" not in levels(pf.check_topology(c, cores=8, gpus=4))
    assert "WARN" in levels(pf.check_topology(cfg(rollout={"concurrency": 32}), cores=2, gpus=0))  # > 16 trials
    assert "WARN" in levels(pf.check_topology(cfg(rollout={"concurrency": 32}, trainer={"train_batch_size": 16}),
                                              cores=1, gpus=0))
    assert "FATAL" not in levels(pf.check_topology(c, structure_only=True))


def test_concurrency_above_a_steps_trials_serves_validation():
    """Slots beyond a step's trials idle through training, but a validation pass (held-out tasks x val_n) runs
    its trials through the same slots: a warning only when the run never validates."""
    def msgs(**trainer):
        c = cfg(rollout={"concurrency": 32}, trainer={"train_batch_size": 4, **trainer})  # 4 x 4 = 16 trials
        res = pf.check_topology(c, cores=64, gpus=0)
        return [(r.level, r.message) for r in res if "concurrency=32" in r.message]

    ((level, msg),) = msgs(test_freq=0, val_before_train=False)
    assert level == "WARN" and "stay idle" in msg
    ((level, msg),) = msgs(test_freq=10)
    assert level == "PASS" and "slots beyond 16 serve validation's trials" in msg


def test_vllm_checks():
    missing = cfg(serving={"engine": "vllm", "vllm": {"executable": "/nonexistent/vllm"}})
    res = pf.check_vllm(missing, gpus=0)
    assert levels(res)[0] == "FATAL" and "scripts/setup.sh" in res[0].fix
    tp = cfg(serving={"engine": "vllm", "n_replicas": 2,
                      "vllm": {"urls": ["http://a", "http://b"], "tensor_parallel_size": 2}})
    assert "FATAL" in levels(pf.check_vllm(tp, gpus=2)) and "FATAL" not in levels(pf.check_vllm(tp, gpus=4))
    hot = cfg(rollout={"temperature": 0.7, "top_p": 0.9}, serving={"engine": "vllm", "vllm": {"urls": ["http://a"]}})
    assert levels(pf.check_vllm(hot, gpus=0)).count("WARN") == 2


def test_sandbox():
    res = pf.check_sandbox(cfg(sandbox={"backend": "nowhere"}))
    assert levels(res) == ["FATAL"] and "module:Class" in res[0].message and "sandbox.backend" in res[0].message
    res = pf.check_sandbox(cfg(sandbox={"backend": "nosuch_module_xyz:Sandbox"}), structure_only=True)
    assert levels(res) == ["FATAL"] and "nosuch_module_xyz" in res[0].message
    assert levels(pf.check_sandbox(cfg(), structure_only=True)) == ["SKIP"]
    res = pf.check_sandbox(cfg(), probe=lambda b: [("FATAL", f"{b} sandbox unavailable: no bwrap")])
    assert levels(res) == ["FATAL"] and "no bwrap" in res[0].message


class FakeSandbox:
    """A user's own backend (`module:Class`): starts and runs `true`."""

    def __init__(self, task, **opts):
        self.task = task

    async def start(self) -> None:
        pass

    async def exec(self, cmd, cwd=None, env=None, timeout=None) -> ExecResult:
        return ExecResult(0, "", "")

    async def stop(self) -> None:
        pass


def test_sandbox_module_class_backend():
    backend = cfg(sandbox={"backend": f"{__name__}:FakeSandbox"})
    assert levels(pf.check_sandbox(backend)) == ["PASS"]  # the real probe: make_sandbox, start, exec
    assert levels(pf.check_sandbox(backend, structure_only=True)) == ["SKIP"]
    assert levels(pf.check_sandbox(cfg(sandbox={"backend": "legorl.env.local:LocalSandbox"}), structure_only=True)) \
        == ["SKIP"]
    res = pf.check_sandbox(cfg(sandbox={"backend": f"{__name__}:ROOT"}), structure_only=True)
    assert levels(res) == ["FATAL"] and "not a class" in res[0].message


def test_paths(tmp_path):
    from legorl.ops.preflight_model import check_model_path

    assert levels(check_model_path(cfg(model={"path": str(tmp_path / "none")}))) == ["FATAL"]
    assert levels(pf.check_tasks(cfg(tasks={"train": str(tmp_path / "none")}))) == ["FATAL"]
    assert levels(pf.check_tasks(cfg(tasks={"train": "builtin:nope"}))) == ["FATAL"]
    assert levels(pf.check_tasks(cfg(tasks={"train": str(tmp_path)}), structure_only=True)) == ["SKIP"]
    res = pf.check_tasks(cfg(tasks={"val_fraction": 0.0}, trainer={"test_freq": 2}))
    assert "WARN" in levels(res)


def test_pitfalls():
    def warns(**kw) -> int:
        kw["trainer"] = {"max_logprob_abs_diff": 1e-3, **kw.get("trainer", {})}
        return levels(pf.check_pitfalls(cfg(**kw))).count("WARN")

    assert warns() == 0
    assert warns(trainer={"max_logprob_abs_diff": 1e-3, "lr_scheduler": "cosine", "total_steps": 5000}) == 1
    assert warns(trainer={"max_logprob_abs_diff": 1e-3, "lr_scheduler": "linear", "warmup_steps": 10}) == 1
    assert warns(algorithm={"rollout_is": "sequence"}, rollout={"max_response_len": 512, "max_turns": 8}) == 1
    # async defaults to token-level IS; only an explicit "none" with staleness is a pitfall
    assert warns(async_training={"enabled": True, "staleness_threshold": 2}) == 0
    assert warns(async_training={"enabled": True, "staleness_threshold": 2}, algorithm={"rollout_is": "none"}) == 1
    assert warns(serving={"kv_budget_tokens": 4096}) == 1
    (kv,) = [r for r in pf.check_pitfalls(cfg(serving={"kv_budget_tokens": 4096}, rollout={"concurrency": 8,
             "max_prompt_len": 1024, "max_response_len": 64})) if "KV budget" in r.message]
    assert "holds 3 of the 8 concurrent trials" in kv.message and "1088 tokens" in kv.message
    assert "budget/engine/preemptions" in kv.message and "legorl doctor" in kv.message
    (kv,) = [r for r in pf.check_pitfalls(cfg(serving={"kv_budget_tokens": 1024})) if "KV pool" in r.message]
    assert "smaller than one trial at its longest" in kv.message and "context_overflow" in kv.message
    # kv_budget_tokens sizes the embedded engine only; vLLM sizes its own cache
    assert warns(serving={"engine": "vllm", "kv_budget_tokens": 4096, "vllm": {"urls": ["http://a"]}}) == 0
    assert levels(pf.check_pitfalls(cfg())).count("WARN") == 1  # max_logprob_abs_diff unset


def test_demo_structure_only_passes():
    res = pf.preflight_file(ROOT / "examples" / "demo.toml", structure_only=True)
    assert not has_fatal(res)
    lines = format_results(res)
    assert lines[-1].startswith("preflight:") and all(line[0] in "✓⚠✗⊘p" for line in lines)


def test_crashing_check_is_a_warning(monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("bug")

    monkeypatch.setattr(pf, "check_pitfalls", boom)
    res = pf.run_preflight(cfg(), structure_only=True)
    assert [r.level for r in res if r.check == "pitfall"] == ["WARN"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: the local sandbox cannot start")
def test_full_preflight_on_demo_host(smollm_dir):
    """Everything, on this host: model files, tasks, a real sandbox start."""
    res = pf.preflight_file(ROOT / "examples" / "demo.toml")
    assert not has_fatal(res), format_results(res)
    assert "SKIP" not in levels(res) and levels(res, "sandbox")[0] == "PASS"
    # tools on: SmolLM2's template has no native tools, so the proxy's hermes injection is fine
    res = pf.preflight_file(ROOT / "examples" / "demo.toml", ["agent.kwargs.tools=true"])
    assert levels(res, "tool-parser") == ["PASS"]


def test_messages_name_keys_that_exist():
    """Every `section.key` quoted in preflight's and doctor's messages and fix hints is a key of RunConfig."""
    import ast
    import re

    from pydantic import BaseModel

    import legorl.ops.doctor
    import legorl.ops.preflight_model

    sections = "|".join(RunConfig.model_fields)
    pattern = re.compile(rf"(?<![\w./])((?:{sections})\.[a-z_][a-z0-9_.]*[a-z0-9_])")
    named = set()
    for mod in (pf, legorl.ops.preflight_model, legorl.ops.doctor):
        tree = ast.parse(Path(mod.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.update(pattern.findall(node.value))
    assert {"agent.tool_parser", "serving.vllm.executable", "async_training.staleness_threshold"} <= named
    for key in named:
        model: type[BaseModel] = RunConfig
        for part in key.split("."):
            assert part in model.model_fields, f"{key!r} names no config key"
            ann = model.model_fields[part].annotation
            if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                break
            model = ann


def test_warm_start(tmp_path):
    """A warm start that would fail only after the engines started is refused up front."""
    from legorl.ops.preflight_trainer import check_warm_start

    def levels(**cfg) -> list[str]:
        return [r.level for r in check_warm_start(RunConfig(**cfg))]

    on = {"enabled": True}
    assert levels() == []  # off: no line
    ms = {"train": "builtin:shell-multistep"}
    text = {"name": "builtin", "kwargs": {"tools": False}}
    ok_line = check_warm_start(RunConfig(tasks=ms, agent=text, warm_start=on))
    assert [r.level for r in ok_line] == ["PASS"] and re.search(r"(\d+) of \1 training", ok_line[0].message)
    assert levels(tasks=ms, agent={"name": "builtin"}, warm_start=on) == ["FATAL"]  # tool calls: not rendered
    assert levels(tasks=ms, agent={"name": "mini-swe-agent"}, warm_start=on) == ["FATAL"]
    assert levels(agent=text, warm_start=on) == ["FATAL"]  # shell-basics ships no demonstrations
    missing = {"enabled": True, "data": str(tmp_path / "none.jsonl")}
    assert levels(warm_start=missing) == ["FATAL"]
    (tmp_path / "none.jsonl").write_text("{}\n")
    assert levels(warm_start=missing) == ["PASS"]


def test_decode_attention_check(monkeypatch, tmp_path):
    """The engine line says which decode path a run gets; `kernel` that cannot be had refuses to start."""
    from legorl.serving.embedded import decode_kernel

    line = pf.check_decode_attention(cfg())
    assert levels(line) == ["PASS", "PASS"] and "the C kernel (decode_kernel-" in line[0].message
    assert "torch gather path" in pf.check_decode_attention(cfg(serving={"decode_attention": "torch"}))[0].message
    assert levels(pf.check_decode_attention(cfg(serving={"dtype": "bfloat16"}))) == ["PASS"]
    assert levels(pf.check_decode_attention(cfg(serving={"dtype": "bfloat16", "decode_attention": "kernel"}))) == [
        "FATAL"]
    assert levels(pf.check_decode_attention(cfg(), structure_only=True)) == ["SKIP"]
    assert pf.check_decode_attention(cfg(serving={"engine": "vllm"})) == []
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))  # a machine without a compiler
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    decode_kernel._load.cache_clear()
    try:
        res = pf.check_decode_attention(cfg())
        assert levels(res) == ["WARN"] and "no C compiler" in res[0].message and "gcc" in res[0].fix
        assert levels(pf.check_decode_attention(cfg(serving={"decode_attention": "kernel"}))) == ["FATAL"]
    finally:
        decode_kernel._load.cache_clear()

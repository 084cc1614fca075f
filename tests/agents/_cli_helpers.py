"""Shared by the real-CLI tests: scripted and hanging policies, one trial through proxy + sandbox, and
`ensure_cli`, which installs a missing npm CLI at its tested version so no harness test skips where npm is."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from legorl.agents.base import SessionEndpoint
from legorl.agents.install import AGENTS, AgentNotInstalledError, agents_dir, find_binary, install
from legorl.agents.mini_swe import MiniSweAgent
from legorl.env.local import LocalSandbox
from legorl.models.chat import encode_text
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.manager import SingleReplicaManager
from legorl.serving.types import GenerateRequest, TokenOutput


def ensure_cli(name: str) -> Path:
    """The CLI's binary; installed here (pinned, under a lock for xdist) when missing and npm exists.
    Without npm it skips, unless LEGORL_REQUIRE_AGENTS=1 (then a missing CLI fails the test)."""
    try:
        return find_binary(name)
    except AgentNotInstalledError as exc:
        missing = str(exc)
    if shutil.which("npm") is None:
        if os.environ.get("LEGORL_REQUIRE_AGENTS") == "1":
            pytest.fail(f"{missing}; npm is not installed")
        pytest.skip(f"{missing}; npm is not installed here")
    agents_dir().mkdir(parents=True, exist_ok=True)
    with open(agents_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(AgentNotInstalledError):
            return find_binary(name)
        try:
            install(name, AGENTS[name].tested, log=False)
        except RuntimeError as exc:
            pytest.fail(f"{name} is missing and `legorl agents install {name}` failed: {exc}")
    return find_binary(name)


class ScriptedManager:
    """TEST DOUBLE (a random tiny model cannot emit a chosen tool call): answers with scripted text,
    while the logprobs it reports are the real engine's `prompt_logprobs` of exactly those tokens."""

    def __init__(self, real: SingleReplicaManager, tokenizer, script: list[str]) -> None:
        self.real, self.tok, self.script = real, tokenizer, list(script)
        self.eos = tokenizer.eos_token_id

    @property
    def weight_version(self) -> int:
        return self.real.weight_version

    @property
    def max_model_len(self) -> int:
        return self.real.max_model_len

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        text = self.script.pop(0) if self.script else "I am done."
        ids = [*encode_text(self.tok, text), self.eos]
        lps = await self.real.prompt_logprobs(request.prompt_ids + ids, request.session_id,
                                              request.sampling.temperature or 1.0)
        n = len(request.prompt_ids)
        return TokenOutput(request.request_id, n, ids, lps[n:], "stop", self.real.weight_version)

    async def prompt_logprobs(self, token_ids, session_id=None, temperature=1.0):
        return await self.real.prompt_logprobs(token_ids, session_id, temperature)

    async def abort(self, request_id):
        return await self.real.abort(request_id)

    def end_session(self, session_id):
        self.real.end_session(session_id)


class HangingManager(ScriptedManager):
    """TEST DOUBLE: a policy that answers only when aborted, so only the trial's timeout ends the agent."""

    aborted: dict[str, asyncio.Event]

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self.aborted = getattr(self, "aborted", {})
        event = self.aborted.setdefault(request.request_id, asyncio.Event())
        await asyncio.wait_for(event.wait(), 600)
        return TokenOutput(request.request_id, len(request.prompt_ids), [], [], "abort", self.weight_version)

    async def abort(self, request_id):
        self.aborted = getattr(self, "aborted", {})
        self.aborted.setdefault(request_id, asyncio.Event()).set()


def tool_call(command: str, tool: str = "bash", **extra: str) -> str:
    """A tool call in the tiny model's (Hermes) format."""
    args = json.dumps({"command": command, **extra})
    return '<tool_call>\n{"name": "' + tool + '", "arguments": ' + args + "}\n</tool_call>"


async def run_trial(manager, tokenizer, task, sandbox_root, tmp_path, limits, scaffold=None, wait=None):
    """(scaffold result, session record, workdir files) of one trial through a fresh proxy."""
    proxy = ProxyServer(manager, tokenizer, ProxyConfig())
    await proxy.start()
    # The host's /opt read-only in the sandbox, as a layered (Dockerfile) trial sees it: a staged agent
    # must mount elsewhere (issue 33: `Can't mkdir parents for /opt/legorl/agent`).
    sandbox = LocalSandbox(task, root_dir=sandbox_root, extra_ro_binds={"/opt": "/opt"})
    await sandbox.start()
    try:
        s = proxy.open_session()
        endpoint = SessionEndpoint(s.openai_base_url, s.anthropic_base_url, model="legorl-policy")
        run = (scaffold or MiniSweAgent()).run(task.instruction, sandbox, endpoint, limits, tmp_path / "logs")
        result = await asyncio.wait_for(run, wait)
        record = await proxy.close_session(s.id)
        workdir = sandbox.host_path(task.workdir)
        files = {p.name: p.read_text() for p in workdir.iterdir() if p.is_file()} if workdir else {}
        return result, record, files
    finally:
        await sandbox.stop()
        await proxy.close()


def policy_logprobs(record) -> list[float | None]:
    return [lp for lp, m in zip(record.logprobs, record.mask, strict=True) if m]


def procs_matching(needle: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmd:
                out.append(f"{pid}: {cmd[:200]}")
    return out


def assert_output_is_context(record, tokenizer, output: str, reply: str) -> None:
    """The command's `output` reached the model as context (mask 0), never as policy tokens; the policy
    sampled `reply`; every policy token has a logprob."""
    policy = policy_logprobs(record)
    assert policy and all(lp is not None and lp <= 0 for lp in policy)
    b = record.main
    context = tokenizer.decode([t for t, m in zip(b.token_ids, b.mask, strict=True) if not m])
    sampled = tokenizer.decode([t for t, m in zip(b.token_ids, b.mask, strict=True) if m])
    assert output in context and output not in sampled and reply in sampled


def teacher_forced_mean_delta(model_dir, branch) -> float:
    """Mean |recorded logprob - fp32 teacher-forced logprob| over a branch's policy tokens: what the trainer sees."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.tensor([branch.token_ids])).logits[0, :-1].float()
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(branch.token_ids[1:])[:, None])[:, 0].tolist()
    deltas = [abs(lp - ref[i - 1]) for i, (m, lp) in enumerate(zip(branch.mask, branch.logprobs, strict=True)) if m]
    assert deltas, "no policy tokens"
    return sum(deltas) / len(deltas)


_NET_PROBE = ("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 3)' 2>/dev/null "
              "&& echo open || echo closed")


def sandbox_probe(marker: Path) -> str:
    """A shell command for a harness's tool: uid, hostname and whether the network is reachable go to proof.txt
    in the task dir, and it tries to write `marker`, a host path outside the sandbox."""
    return f"echo $(id -u) $(hostname) $({_NET_PROBE}) > proof.txt; echo x > {marker}"


def assert_probe_ran_sandboxed(files: dict, marker: Path, result, logs: Path, stem: str) -> None:
    """`sandbox_probe` ran inside the sandbox: non-root, hostname `sandbox`, no network, the host untouched
    (`stem`: the harness's log names under `logs`, shown when proof.txt is missing)."""
    assert "proof.txt" in files, (result, (logs / f"{stem}.stdout").read_text()[-3000:],
                                  (logs / f"{stem}.stderr").read_text()[-2000:])
    uid, host, network = files["proof.txt"].split()
    assert host == "sandbox" and int(uid) != 0 and network == "closed"
    assert not marker.exists()

"""Start, watch and stop vLLM OpenAI-compatible servers (one per replica).

legorl does not import vLLM: it runs the `vllm` executable from wherever it is installed (by default
the project's `.venv-vllm`, built by `scripts/setup.sh`), so vLLM's pinned dependencies never
meet the trainer's. Servers bind 127.0.0.1, run in their own process group (stopped as a whole,
also when this process exits without closing them), log to a file in the run directory, and a
server that dies while starting is reported with its own last error line.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from legorl.serving.pairgroup import free_port
from legorl.serving.types import EngineError
from legorl.serving.vllm.lora import LORA_ENV, lora_server_args


class VLLMNotInstalledError(EngineError):
    """No `vllm` executable was found."""


class VLLMStartupError(EngineError):
    """The server exited or did not become healthy in time."""


@dataclass
class VLLMServerConfig:
    """What one server is started with. CPU defaults: fp32 (matches the fp32 trainer to ~1e-5),
    eager mode (starts in ~25 s instead of ~150 s on CPU, no throughput loss measured), 2 GiB KV."""

    model_dir: Path
    served_name: str = "policy"
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    dtype: str = "float32"
    max_model_len: int = 4096
    max_num_seqs: int = 64
    seed: int = 0
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    tensor_parallel_size: int = 1
    kv_cache_gib: int = 2  # CPU build: VLLM_CPU_KVCACHE_SPACE (whole GiB)
    gpu_memory_utilization: float | None = None  # GPU build: None keeps vLLM's default
    return_routed_experts: bool = False
    lora_rank: int = 0  # > 0: --enable-lora for adapters of this rank, loaded at run time (lora.py)
    worker_extension: bool = False  # load worker_ext.WeightReceiver (weight_transport = "collective")
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    executable: str | None = None  # None: find_vllm_executable()
    work_dir: Path | None = None  # logs + caches; None: a temp dir
    startup_timeout_s: float = 600.0


def find_vllm_executable(explicit: str | None = None) -> str:
    """`explicit` (only it, when given), else $LEGORL_VLLM, the project's .venv-vllm, `vllm` on PATH."""
    if explicit:
        if Path(explicit).is_file() and os.access(explicit, os.X_OK):
            return explicit
        raise VLLMNotInstalledError(f"serving.vllm_executable={explicit!r} is not an executable file")
    here = Path(__file__).resolve()
    candidates = [os.environ.get("LEGORL_VLLM")]
    candidates += [str(p / ".venv-vllm" / "bin" / "vllm") for p in (Path.cwd(), *here.parents[3:5])]
    candidates.append(shutil.which("vllm"))
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise VLLMNotInstalledError(
        "vLLM is not installed: run `bash scripts/setup.sh` (builds vLLM's CPU build into .venv-vllm) "
        "or set serving.vllm_executable / $LEGORL_VLLM to a `vllm` executable")


def vocab_size(model_dir: Path | None) -> int | None:
    """The vocabulary size in a HF model directory's config.json (None when unknown)."""
    try:
        return int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])  # type: ignore[arg-type]
    except (OSError, ValueError, KeyError, TypeError):
        return None


_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_ERROR = re.compile(r"(Error|Exception|error:)")


def _machine_dir(name: str) -> Path | None:
    """`$LEGORL_HOME/vllm/<name>`, created: a cache every vLLM server of this machine shares. None when the
    home is not writable (each caller then keeps its cache in the run dir)."""
    try:
        from legorl.models.home import legorl_home

        shared = legorl_home() / "vllm" / name
        shared.mkdir(parents=True, exist_ok=True)
        return shared
    except OSError:
        return None


def _share_modelinfos(cache_root: Path) -> None:
    """Point the server's `modelinfos/` at one directory shared by every server of this machine.

    vLLM inspects the model class in a subprocess that imports vLLM again (~8-10 s of a ~45 s CPU
    start) unless `$VLLM_CACHE_ROOT/modelinfos` already holds the answer; the run-dir cache root is
    new for every run, so without this each start paid it. The entries are keyed by a hash of the
    model class's source and written atomically, so sharing them is safe; the rest of the cache
    root stays in the run dir. Best effort: without the link vLLM simply inspects again."""
    link = cache_root / "modelinfos"
    if link.exists() or link.is_symlink() or (shared := _machine_dir("modelinfos")) is None:
        return
    try:
        link.symlink_to(shared, target_is_directory=True)
    except OSError:
        pass


def _inductor_cache(work_dir: Path) -> Path:
    """The TorchInductor cache every server of this machine shares, `$LEGORL_HOME/vllm/inductor`.

    vLLM-cpu compiled a few C++ kernels with Inductor at a server's first real request (~11 s of ~18 s
    there, 2-core box, 2026-12-05): with a cache per run dir every start, and every restart after a crash,
    paid it again. An eager server no longer compiles them (EAGER_ENV); a graph-mode one does. Inductor
    keys its entries by source, compiler flags and vector ISA and writes them under file locks, so one
    directory is safe to share (its own default is one per user in /tmp). Falls back to the work dir when
    the home is not writable."""
    return _machine_dir("inductor") or work_dir / "inductor"


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


EAGER_ENV = {"TORCHDYNAMO_DISABLE": "1"}
"""An eager server's environment. vLLM still wraps a few sampler helpers in `torch.compile` under
`--enforce-eager` (`batched_count_greater_than`, the token ranks of every logprobs request), so the first
request for logprobs after each start waited for dynamo and Inductor: 8.9 s with a warm Inductor cache, 18.9 s
with a fresh one, 0.7 s without (`bench/vllm_first_request.py`, 2-core Intel Xeon (Ice Lake), quiet, 2026-12-07;
the same logprobs and top-3 to the bit). Those helpers run eagerly instead: one [batch, vocab] boolean temporary
more, nothing else."""


class VLLMServer:
    """One `vllm serve` process. `await start()` returns once `/health` answers 200."""

    def __init__(self, config: VLLMServerConfig):
        self.config = config
        self.port = config.port or free_port(config.host)
        self.url = f"http://{config.host}:{self.port}"
        work = config.work_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"legorl-vllm-{self.port}"
        self.work_dir = Path(work)
        self.log_path = self.work_dir / f"server-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.startup_s = 0.0
        self._ext: Path | None = None  # the worker extension's directory (config.worker_extension)
        self._tmp: str | None = None  # TMPDIR: short (vLLM puts unix sockets there, 107-byte path limit)

    def command(self) -> list[str]:
        c = self.config
        cmd = [find_vllm_executable(c.executable), "serve", str(c.model_dir),
               "--host", c.host, "--port", str(self.port), "--served-model-name", c.served_name,
               "--dtype", c.dtype, "--max-model-len", str(c.max_model_len), "--max-num-seqs", str(c.max_num_seqs),
               "--seed", str(c.seed), "--tensor-parallel-size", str(c.tensor_parallel_size),
               # logprobs of the distribution sampled from (after temperature), as the trainer recomputes
               "--logprobs-mode", "processed_logprobs",
               "--enable-prompt-tokens-details", "--disable-uvicorn-access-log"]
        cmd.append("--enable-prefix-caching" if c.enable_prefix_caching else "--no-enable-prefix-caching")
        if c.enforce_eager:
            cmd.append("--enforce-eager")
        if c.gpu_memory_utilization is not None:
            cmd += ["--gpu-memory-utilization", str(c.gpu_memory_utilization)]
        if c.return_routed_experts:
            cmd.append("--enable-return-routed-experts")
        if c.lora_rank:
            cmd += lora_server_args(c.lora_rank)
        if c.worker_extension:
            from legorl.serving.vllm.transfer import EXTENSION_CLS

            cmd += ["--worker-extension-cls", EXTENSION_CLS]
        return cmd + list(c.extra_args)

    def environment(self) -> dict[str, str]:
        w = self.work_dir
        env = dict(os.environ)
        env.update({
            "VLLM_SERVER_DEV_MODE": "1",  # /collective_rpc, /reset_prefix_cache, /pause, /abort_requests
            "VLLM_CPU_KVCACHE_SPACE": str(int(self.config.kv_cache_gib)),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CACHE_ROOT": str(w / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(_inductor_cache(w)),
            "TMPDIR": self._tmp or tempfile.gettempdir(), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
        })
        if self.config.enforce_eager:  # see EAGER_ENV
            env.update(EAGER_ENV)
        if self.config.return_routed_experts:  # routed-expert output lives in Model Runner V2 (GPU only)
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        if self.config.lora_rank:  # /v1/load_lora_adapter and /v1/unload_lora_adapter
            env.update(LORA_ENV)
        env.pop("PYTHONPATH", None)  # the trainer's path must not leak into vLLM's venv
        if self.config.worker_extension:  # a directory holding only the extension module
            if self._ext is None:
                from legorl.serving.vllm.transfer import extension_dir

                self._ext = extension_dir(self.work_dir)
            env["PYTHONPATH"] = str(self._ext)
        env.update(self.config.env)
        return env

    async def start(self) -> None:
        """Start and wait for health. A port this server picked itself can be taken by another process
        between `free_port()` and vLLM's bind (seen in the suite: `[Errno 98] Address already in use`);
        then it picks a new one and starts again (twice at most). A port the caller chose is never changed."""
        for attempt in range(3):
            try:
                return await self._start_once()
            except VLLMStartupError as exc:
                if self.config.port or "Address already in use" not in str(exc) or attempt == 2:
                    raise
                self.port = free_port(self.config.host)
                self.url = f"http://{self.config.host}:{self.port}"
                self.log_path = self.work_dir / f"server-{self.port}.log"

    async def _start_once(self) -> None:
        (self.work_dir / "cache").mkdir(parents=True, exist_ok=True)
        _share_modelinfos(self.work_dir / "cache")
        self._tmp = tempfile.mkdtemp(prefix="legorl-vllm-")
        atexit.register(shutil.rmtree, self._tmp, True)
        cmd = self.command()
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.environment(), start_new_session=True)
        weakref.finalize(self, _kill_group, self.proc)
        atexit.register(_kill_group, self.proc)
        try:
            await self._wait_healthy(t0)
        except BaseException:
            await self.stop()
            raise
        self.startup_s = time.monotonic() - t0

    async def _wait_healthy(self, t0: float) -> None:
        assert self.proc is not None
        deadline = t0 + self.config.startup_timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    raise VLLMStartupError(
                        f"vLLM server exited with code {rc} while starting: {self.last_error()} "
                        f"(full log: {self.log_path})")
                try:
                    async with s.get(self.url + "/health") as r:
                        if r.status == 200:
                            return
                except (TimeoutError, aiohttp.ClientError):
                    pass
                if time.monotonic() > deadline:
                    raise VLLMStartupError(
                        f"vLLM server not healthy after {self.config.startup_timeout_s:.0f} s "
                        f"(raise serving.vllm_startup_timeout_sec; log: {self.log_path})")
                await asyncio.sleep(0.5)

    def log_tail(self, n: int = 200) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def last_error(self) -> str:
        """The server's last error line, with its indented detail line (pydantic puts the reason there)."""
        lines = [ln.rstrip() for ln in self.log_tail() if ln.strip()]
        hits = [i for i, ln in enumerate(lines) if _ERROR.search(ln)]
        if not hits:
            return (lines or ["(no output)"])[-1][:500]
        i = hits[-1]
        detail = [ln.strip() for ln in lines[i + 1 : i + 2] if ln.startswith((" ", "\t"))]
        return " ".join([lines[i].strip(), *detail])[:500]

    def kv_budget_tokens(self) -> int:
        """The KV cache size the server reported at start (0 when unknown)."""
        for ln in reversed(self.log_tail(2000)):
            m = _KV_TOKENS.search(ln)
            if m:
                return int(m.group(1).replace(",", ""))
        return 0

    async def died(self, within_s: float = 0.0) -> bool:
        """Whether the server process is gone, waiting up to `within_s` for a dying one to exit."""
        deadline = time.monotonic() + within_s
        while self.alive and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return not self.alive

    async def restart(self) -> None:
        """Stop whatever is left of the server and start it again on the same port (engines hold its URL)."""
        await self.stop(timeout_s=10.0)
        self.proc = None
        await self._start_once()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after `timeout_s`."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._remove_tmp()
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        _kill_group(proc)
        await asyncio.to_thread(proc.wait)
        # children that outlived the leader (engine core, workers) share its group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


"""Installing and locating external agent CLIs (`legorl agents install NAME`).

npm agents (Claude Code, OpenCode) go to `$LEGORL_HOME/agents/<name>` with a plain `npm install`, never
into the default setup (hundreds of MB each). Python agents install into the running interpreter.
A sandbox's uid cannot read the trainer's home (often 0700), so `stage_readable` exposes an installed
agent as a hard-linked (else copied) world-readable tree under /tmp, made once per version.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from legorl.models.store import legorl_home


@dataclass(frozen=True)
class AgentSpec:
    name: str
    kind: str  # "npm" | "pip" | "unsupported"
    package: str
    binary: str = ""  # the command name (npm: node_modules/.bin/<binary>)
    path_env: str = ""  # an env var that names the binary directly, checked first
    note: str = ""
    tested: str = ""  # the version the suite runs (CI installs it; tests install it when npm is there)
    native: str = ""  # npm: the platform binary under node_modules, run instead of a node launcher


AGENTS: dict[str, AgentSpec] = {
    "mini-swe-agent": AgentSpec("mini-swe-agent", "pip", "mini-swe-agent>=2.4,<3"),
    "claude-code": AgentSpec("claude-code", "npm", "@anthropic-ai/claude-code", "claude", "LEGORL_CLAUDE_BIN",
                             tested="2.1.332"),
    "opencode": AgentSpec("opencode", "npm", "opencode-ai", "opencode", "LEGORL_OPENCODE_BIN", tested="1.18.33"),
    # bin/codex.js only picks the musl binary of the platform package and spawns it: run that directly.
    "codex": AgentSpec("codex", "npm", "@openai/codex", "codex", "LEGORL_CODEX_BIN", tested="0.171.0",
                       native="@openai/codex-linux-{arch}/vendor/{triple}/bin/codex"),
    # a node bundle (cli-entry.js): the adapter runs it with the sandbox's node
    "qwen-code": AgentSpec("qwen-code", "npm", "@qwen-code/qwen-code", "qwen", "LEGORL_QWEN_BIN", tested="0.24.4"),
    "openhands": AgentSpec(
        "openhands", "unsupported", "openhands-sdk",
        note="openhands-sdk requires Python >= 3.12; legorl runs on "
        f"{sys.version_info.major}.{sys.version_info.minor}. Run OpenHands from a Python 3.12 environment.",
    ),
}


class AgentNotInstalledError(RuntimeError):
    """An agent CLI is missing; the message names the command that installs it."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.agent = name
        extra = f" ({detail})" if detail else ""
        super().__init__(f"agent {name!r} is not installed{extra}: run `legorl agents install {name}`")


def agents_dir() -> Path:
    return legorl_home() / "agents"


def install_dir(name: str) -> Path:
    return agents_dir() / name


def _spec(name: str) -> AgentSpec:
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}: choose one of {', '.join(sorted(AGENTS))}")
    return AGENTS[name]


def find_binary(name: str) -> Path:
    """The agent's executable: $<path_env>, then our install dir, then PATH. Raises with the fix."""
    spec = _spec(name)
    if spec.kind != "npm":
        raise ValueError(f"{name} is not a CLI binary agent")
    candidates = []
    if spec.path_env and os.environ.get(spec.path_env):
        candidates.append(Path(os.environ[spec.path_env]))
    modules = install_dir(name) / "node_modules"
    if spec.native:
        candidates.append(modules / _native_path(spec.native))
    candidates.append(modules / ".bin" / spec.binary)
    found = shutil.which(spec.binary)
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            c = c.resolve()
            if spec.native and not _is_elf(c):  # a launcher on PATH: its package's platform binary
                root = _package_root(c)
                near = [root / "node_modules" / _native_path(spec.native), root.parent.parent / _native_path(spec.native)]
                c = next((n.resolve() for n in near if n.is_file()), None)
                if c is None:
                    continue
            return c
    raise AgentNotInstalledError(name, f"no `{spec.binary}` in ${spec.path_env}, {install_dir(name)} or PATH")


def _native_path(template: str) -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    triple = f"{'x86_64' if arch == 'x64' else 'aarch64'}-unknown-linux-musl"
    return template.format(arch=arch, triple=triple)


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _package_root(path: Path) -> Path:
    for parent in path.parents:
        if (parent / "package.json").is_file():
            return parent
    return path.parent


def stage_readable(binary: Path, stage_root: Path | None = None, tree: Path | None = None) -> tuple[Path, str]:
    """(a world-readable directory, the binary's path inside it). A native binary is staged alone,
    or with the directory `tree` that holds it and its resources (Codex: rg, helpers);
    a script (e.g. a node entry point) brings its npm package along."""
    binary = binary.resolve()
    src = tree.resolve() if tree is not None else binary if _is_elf(binary) else _package_root(binary)
    st = binary.stat()
    key = hashlib.sha256(f"{src}:{binary}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root = stage_root or Path(tempfile.gettempdir()) / "legorl-agents"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    dest = root / f"{binary.name}-{key}"
    rel = binary.name if src == binary else str(binary.relative_to(src.parent))
    if not dest.exists():
        tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=root))
        try:
            if src == binary:
                _link_or_copy(binary, tmp / binary.name)
            else:
                shutil.copytree(src, tmp / src.name, symlinks=True, copy_function=_link_or_copy)
            for dirpath, _dirs, _files in os.walk(tmp):
                os.chmod(dirpath, 0o755)
            try:
                tmp.rename(dest)
            except OSError:  # another process staged it first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest, rel


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    mode = os.stat(dst).st_mode
    if not mode & 0o004:
        os.chmod(dst, mode | 0o044 | (0o011 if mode & 0o100 else 0))


def install(name: str, version: str | None = None, log: bool = True) -> str:
    """Installs one agent; returns where it went. Raises RuntimeError with the tool's own error text."""
    spec = _spec(name)
    if spec.kind == "unsupported":
        raise RuntimeError(f"cannot install {name} here: {spec.note}")
    pkg = spec.package
    if version:
        pkg = f"{spec.package}=={version}" if spec.kind == "pip" else f"{spec.package}@{version}"
    if spec.kind == "pip":
        argv = [sys.executable, "-m", "pip", "install", pkg]
        target = "the running Python environment"
    else:
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"installing {name} needs npm (Node.js >= 18): apt-get install nodejs npm")
        dest = install_dir(name)
        dest.mkdir(parents=True, exist_ok=True)
        argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(dest), pkg]
        target = str(dest)
    proc = subprocess.run(argv, capture_output=not log, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed ({proc.returncode}): {(proc.stderr or '')[-2000:]}")
    if spec.kind == "npm":
        find_binary(name)  # fails loudly if the package installed but its binary did not
    return target


def status() -> list[tuple[str, str, str]]:
    """(name, installed at / 'no' / why not, package) for every known agent."""
    rows = []
    for name, spec in AGENTS.items():
        if spec.kind == "unsupported":
            where = f"unsupported here: {spec.note}"
        elif spec.kind == "pip":
            import importlib.util

            where = "yes (python)" if importlib.util.find_spec("minisweagent") else "no"
        else:
            try:
                where = str(find_binary(name))
            except AgentNotInstalledError:
                where = "no"
        rows.append((name, where, spec.package))
    return rows

"""Anti-reward-hacking checks around verification.

The agent never sees /tests (it is mounted only after the agent finished); what it could still try
is to prepare the verifier's ground: plant a reward file or other files in /logs/verifier, pre-create
/tests so an upload merges into its copy, or leave a process behind that edits either during
verification. These checks detect each, and `verify` reports them as flags on its result.
All checks run through `Sandbox.exec`, so they hold for every backend.
A process still running during verification is a different threat from a planted file: it could write
the reward after these checks. Backends either stop such processes before test.sh (docker,
kubernetes) or fence the verifier's paths off from them (local: `legorl.env.localphase`, where the
reward dir the verifier writes is one no agent process can see).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from legorl.env.base import Sandbox

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"

_HASH_CMD = (
    'cd "$0" 2>/dev/null || exit 3; '
    "find . \\( -type f -o -type l \\) -print0 | LC_ALL=C sort -z | "
    "while IFS= read -r -d '' f; do "
    'if [ -L "$f" ]; then printf "%s link:%s\\n" "$f" "$(readlink "$f")"; '
    'else printf "%s %s\\n" "$f" "$(sha256sum < "$f" | cut -d" " -f1)"; fi; done'
)


def hash_host_tree(root: Path) -> dict[str, str]:
    """relative path -> sha256 (or link target) of every file under a host directory."""
    out: dict[str, str] = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            p = Path(dirpath) / n
            rel = "./" + str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def hash_cmd(path: str) -> str:
    """The shell command that prints the map of the sandbox directory `path` (exit 3: no such directory)."""
    return f"bash -c {shlex.quote(_HASH_CMD)} {shlex.quote(path)}"


def parse_hash(stdout: str, exit_code: int | None) -> dict[str, str] | None:
    if exit_code == 3:
        return None
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        name, _, digest = line.rpartition(" ")
        if name:
            out[name] = digest
    return out


async def hash_tree(sandbox: Sandbox, path: str) -> dict[str, str] | None:
    """The same map computed inside the sandbox; None when the directory does not exist."""
    r = await sandbox.exec(hash_cmd(path), cwd="/", timeout=60)
    return parse_hash(r.stdout, r.exit_code)


async def exec_parts(sandbox: Sandbox, parts: dict[str, str], timeout: float = 60) -> dict[str, tuple[str, int]]:
    """Run several commands, in order, in one `Sandbox.exec`: each part's stdout and exit status.

    One process spawn instead of one per check: a spawn is most of the verifier phase's fixed cost when
    the cores are busy (8 execs took 0.5-0.7 s per trial in the demo). Parts are framed by marker lines
    with a nonce drawn now, after the agent finished, so nothing a part prints (a planted file's name)
    can forge a frame."""
    nonce = secrets.token_hex(12)
    script = "".join(f"echo '@@{nonce} part {name}'\n( {cmd}\n)\nprintf '\\n@@{nonce} rc %s\\n' $?\n"
                     for name, cmd in parts.items())
    r = await sandbox.exec(script, cwd="/", timeout=timeout)
    out: dict[str, tuple[str, int]] = {}
    name, lines = None, []
    for line in r.stdout.split("\n"):
        if line.startswith(f"@@{nonce} part "):
            name, lines = line[len(f"@@{nonce} part "):], []
        elif line.startswith(f"@@{nonce} rc ") and name is not None:
            out[name] = ("\n".join(lines[:-1] if lines and lines[-1] == "" else lines), int(line.split()[-1]))
            name = None
        elif name is not None:
            lines.append(line)
    missing = [n for n in parts if n not in out]
    if missing:  # the exec was cut short (timeout, killed): what did not run reads as failed
        out.update({n: ("", -1) for n in missing})
    return out


def compare(expected: dict[str, str], actual: dict[str, str] | None, where: str) -> list[str]:
    """Flags for files changed or removed relative to `expected` (new files are left to the caller)."""
    if actual is None:
        return [f"{where} disappeared"]
    flags = []
    changed = sorted(k for k in expected if k in actual and actual[k] != expected[k])
    missing = sorted(k for k in expected if k not in actual)
    if changed:
        flags.append(f"{where}: modified {', '.join(changed[:10])}")
    if missing:
        flags.append(f"{where}: removed {', '.join(missing[:10])}")
    return flags


@dataclass
class GuardReport:
    flags: list[str] = field(default_factory=list)

    @property
    def tampered(self) -> bool:
        return bool(self.flags)


async def before_verification(sandbox: Sandbox) -> GuardReport:
    """Looks for anything the agent left in the verifier's paths, then clears those paths (one exec)."""
    rep = GuardReport()
    res = await exec_parts(sandbox, {
        "planted": hash_cmd(VERIFIER_DIR),
        "tests": f"ls -A {TESTS_DIR} 2>/dev/null",
        # Clear both: a stale or planted reward must never be read as this run's result.
        "clear": f"find {VERIFIER_DIR} {TESTS_DIR} -mindepth 1 -delete 2>/dev/null; rm -rf {TESTS_DIR} 2>/dev/null; true",
        "left": hash_cmd(VERIFIER_DIR),
    })
    planted = parse_hash(*res["planted"])
    if planted:
        rep.flags.append(
            f"files planted in {VERIFIER_DIR} before verification: {', '.join(sorted(planted)[:10])}"
        )
    pre = res["tests"][0]
    if pre.strip():  # an empty mount point is harmless; content is not
        rep.flags.append(f"{TESTS_DIR} existed before verification: {pre.split()[:10]}")
    left = parse_hash(*res["left"])
    if left or res["left"][1] == -1:
        rep.flags.append(f"could not clear {VERIFIER_DIR}: {', '.join(sorted(left or {})[:10]) or 'the check did not run'}")
    return rep


async def can_see_tests(sandbox: Sandbox) -> bool:
    """True if anything is at /tests: must be False for the whole agent phase."""
    r = await sandbox.exec(f"test -e {TESTS_DIR}", cwd="/", timeout=30)
    return r.exit_code == 0

"""Anti-reward-hacking checks around verification.

The agent never sees /tests (it is mounted only after the agent finished); what it could still try
is to prepare the verifier's ground: plant a reward file or other files in /logs/verifier, pre-create
/tests so an upload merges into its copy, or leave a process behind that edits either during
verification. These checks detect each, and `verify` reports them as flags on its result.
All checks run through `Sandbox.exec`, so they hold for every backend.
"""

from __future__ import annotations

import hashlib
import os
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


async def hash_tree(sandbox: Sandbox, path: str) -> dict[str, str] | None:
    """The same map computed inside the sandbox; None when the directory does not exist."""
    r = await sandbox.exec(f"bash -c {shlex.quote(_HASH_CMD)} {shlex.quote(path)}", cwd="/", timeout=60)
    if r.exit_code == 3:
        return None
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        name, _, digest = line.rpartition(" ")
        if name:
            out[name] = digest
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
    """Looks for anything the agent left in the verifier's paths, then clears those paths."""
    rep = GuardReport()
    planted = await hash_tree(sandbox, VERIFIER_DIR)
    if planted:
        rep.flags.append(
            f"files planted in {VERIFIER_DIR} before verification: {', '.join(sorted(planted)[:10])}"
        )
    pre = await sandbox.exec(f"ls -A {TESTS_DIR} 2>/dev/null", cwd="/", timeout=30)
    if pre.stdout.strip():  # an empty mount point is harmless; content is not
        rep.flags.append(f"{TESTS_DIR} existed before verification: {pre.stdout.split()[:10]}")
    # Clear both: a stale or planted reward must never be read as this run's result.
    await sandbox.exec(
        f"find {VERIFIER_DIR} {TESTS_DIR} -mindepth 1 -delete 2>/dev/null; rm -rf {TESTS_DIR} 2>/dev/null; true",
        cwd="/",
        timeout=30,
    )
    left = await hash_tree(sandbox, VERIFIER_DIR)
    if left:
        rep.flags.append(f"could not clear {VERIFIER_DIR}: {', '.join(sorted(left)[:10])}")
    return rep


async def can_see_tests(sandbox: Sandbox) -> bool:
    """True if anything is at /tests: must be False for the whole agent phase."""
    r = await sandbox.exec(f"test -e {TESTS_DIR}", cwd="/", timeout=30)
    return r.exit_code == 0

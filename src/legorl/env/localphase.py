"""Harbor's trial phases on the local backend: per-phase network and user, the verifier's own paths,
and the end of the agent's processes (a mixin of `LocalSandbox`).

The agent's processes live until the verifier has finished (a server it left running is queried by
test.sh: `legorl.env.persist`). What a process alive during verification could do, and why it cannot:
- write the reward: the verifier's /logs/verifier is a fresh host directory bound only into the
  verifier's execs; a leftover's mount namespace still shows the agent's copy, which is never read;
- read or change /tests: it is bound only into execs started after the agent finished, and each exec
  has its own pid namespace, so no leftover can reach a verifier process's mounts via /proc/<pid>/root,
  ptrace it or signal it (they share only the loopback and the workdir);
- plant files for the verifier's interpreters or race its temp files: HOME, /tmp and /var/tmp are
  fresh for the verifier phase, invisible to leftovers;
- keep going after the verdict: `quiesce()` kills every exec's namespace right after test.sh, before
  the reward is read.
What it can still do is what the agent could do anyway: change the workdir (as in Harbor's single
container). A test.sh that copies its expected outputs into the workdir exposes them to leftovers.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any

from legorl.env import procs
from legorl.env.bwrap import SANDBOX_HOME

log = logging.getLogger(__name__)

# sandbox path -> (the agent's host dir under the trial root, the verifier's fresh one)
_VERIFIER_OWN = {SANDBOX_HOME: ("home", "verifier-home"), "/tmp": ("tmp", "verifier-tmp"),
                 "/var/tmp": ("tmp", "verifier-tmp"), "/logs/verifier": ("logs/verifier", "verifier-logs")}


class LocalPhases:
    """enter_phase / quiesce for LocalSandbox (uses its task, root, binds, notes, network, _live, _net)."""

    keeps_agent_processes = True  # verify(): the agent's processes may live through test.sh here
    task: Any
    root: Path | None
    binds: dict[str, Path]
    notes: list[str]
    network: bool
    phase: str
    _network_fixed: bool
    _phase_env: dict[str, str]
    _live: set[int]
    _net: Any

    def _own(self, path: Path) -> None: ...  # LocalSandbox's
    def _write_passwd(self, name: str | None = None) -> None: ...

    async def enter_phase(self, phase: str) -> None:
        """Harbor's per-phase settings: the phase's network ("allowlist" cannot be enforced here:
        no network, said in `notes`), the user name its uid carries, and the verifier's own paths."""
        net = self.task.verifier_network if phase == "verifier" else self.task.agent_network
        if not self._network_fixed:
            self.network = net.public
            if net.mode == "allowlist":
                note = (f"{phase}: network_mode allowlist ({', '.join(net.allowed_hosts)}) is not enforceable "
                        "by the local backend: ran without network")
                if note not in self.notes:
                    self.notes.append(note)
        user = self.task.verifier_user if phase == "verifier" else self.task.agent_user
        if user != (self.task.verifier_user if self.phase == "verifier" else self.task.agent_user):
            await asyncio.to_thread(self._write_passwd, user if user not in (None, "root", "0") else "agent")
        if self.root is not None:
            # The verifier's HOME, temp dirs and reward dir are fresh: nothing the agent planted there
            # (user site-packages, .pth files, pytest plugins, rc files, a reward) reaches it, and its
            # processes' files are out of reach of the agent's still-running ones (module docstring).
            for at, (agent_dir, verifier_dir) in _VERIFIER_OWN.items():
                if phase == "verifier":
                    fresh = self.root / verifier_dir
                    if self.phase != "verifier":
                        await asyncio.to_thread(lambda f=fresh: shutil.rmtree(f, True) or f.mkdir(mode=0o700))
                        self._own(fresh)
                    self.binds[at] = fresh
                else:
                    self.binds[at] = self.root / agent_dir
        self.phase = phase
        self._phase_env = dict(self.task.agent_env) if phase == "agent" else {}

    async def quiesce(self) -> None:
        """Kills every process the trial's commands left running (the agent's servers, the image's
        ENTRYPOINT service); the sandbox stays usable. Called by `verify` after test.sh."""
        # Their drains end, and on_exit drops them, as the namespaces go and each bwrap is reaped: milliseconds,
        # seconds on a loaded host. A killed process counts under the trial's uid until it is reaped.
        if not await procs.end_namespaces(lambda: self._live, 10.0):
            for pid in list(self._live):  # last resort: bwrap itself (procs.kill_namespace says what that costs)
                procs._kill_group(pid)
            if not await procs.end_namespaces(lambda: self._live, 5.0):
                log.warning("sandbox processes %s outlived SIGKILL for 15 s", sorted(self._live))

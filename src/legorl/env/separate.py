"""Harbor's `[verifier] environment_mode = "separate"`: test.sh runs in a fresh environment, not the agent's.

The verifier's environment is built from `tests/Dockerfile` (its build context: tests/) if there is one,
else from the task's own environment config (so its cached build is shared with the agent's). Into it
go only `/logs/artifacts` and the task's `artifacts` paths, copied out of the agent's sandbox through the
host; nothing else of the agent's sandbox reaches it (no workdir, no processes, no network), and the
agent never holds a handle on it: it is started after the agent finished, by the worker, on the same
backend. Its /logs/verifier is copied back into the agent's sandbox afterwards, for the trial's logs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from legorl.env.base import Sandbox, SandboxError
from legorl.env.phases import LOG_DIRS
from legorl.env.verifier import VerifyResult, verify
from legorl.tasks.model import Task

ARTIFACTS_DIR = "/logs/artifacts"


def verifier_task(task: Task, root: Path) -> Task:
    """The task as the verifier's environment sees it: a task dir under `root` whose environment/ is
    tests/ (with a tests/Dockerfile) or the task's environment/, and whose tests are the task's."""
    root.mkdir(parents=True, exist_ok=True)
    tests_df = task.tests_dir / "Dockerfile"
    env_src = task.tests_dir if tests_df.is_file() else task.environment_dir
    # Copies, not symlinks: a backend packs these trees (docker's build context, uploads), and the
    # copy hashes like the original, so the local build cache is shared with the agent's environment.
    if env_src.is_dir():
        shutil.copytree(env_src, root / "environment", symlinks=True)
    else:
        (root / "environment").mkdir()
    shutil.copytree(task.tests_dir, root / "tests", symlinks=True)
    return dataclasses.replace(
        task, path=root, verifier_separate=False, healthcheck=None, artifacts=(),
        agent_network=task.verifier_network, agent_env={}, agent_user=task.verifier_user,
        docker_image=None if tests_df.is_file() else task.docker_image,
    )


async def _exists(sb: Sandbox, path: str) -> bool:
    return (await sb.exec(f"test -e '{path}'", cwd="/", timeout=30)).ok


async def copy_artifacts(src: Sandbox, dst: Sandbox, task: Task, tmp: Path) -> list[str]:
    """/logs/artifacts and the task's artifacts from `src` into `dst` at the same paths; returns them."""
    copied = []
    for i, path in enumerate((ARTIFACTS_DIR, *task.artifacts)):
        if "'" in path or not path.startswith("/") or not await _exists(src, path):
            continue
        host = tmp / str(i) / PurePosixPath(path).name
        host.parent.mkdir(parents=True)
        await src.download(path, host)
        await dst.upload(host, path)
        copied.append(path)
    return copied


async def verify_separate(agent: Sandbox, task: Task, make: Callable[[Task], Sandbox],
                          timeout: float | None = None) -> VerifyResult:
    """Runs the task's tests in a fresh sandbox from `make` holding only the agent's artifacts."""
    with tempfile.TemporaryDirectory(prefix="legorl-verifier-") as d:
        tmp = Path(d)
        vtask = await asyncio.to_thread(verifier_task, task, tmp / "task")
        sb = make(vtask)
        try:
            try:
                await asyncio.wait_for(sb.start(), task.build_timeout_sec)
                copied = await copy_artifacts(agent, sb, task, tmp / "artifacts")
            except (Exception, TimeoutError) as exc:
                why = "timed out" if isinstance(exc, TimeoutError) else str(exc).strip().splitlines()[0][:300]
                return VerifyResult(None, outcome="verifier_error",
                                    reason=f"separate verifier environment could not start: {why}")
            res = await verify(sb, vtask, timeout=timeout)
            res.flags = list(res.flags)
            await _logs_back(sb, agent, tmp / "logs")
            if not copied and task.artifacts:
                res.stderr_tail += f"\n[legorl: none of the artifacts {list(task.artifacts)} existed]"
            return res
        finally:
            await sb.stop()


async def _logs_back(sb: Sandbox, agent: Sandbox, tmp: Path) -> None:
    """The verifier's /logs/verifier into the agent's sandbox, where the trial's logs are collected."""
    logs = LOG_DIRS[1]
    try:
        await sb.download(logs, tmp / "verifier")
        await agent.exec(f"find {logs} -mindepth 1 -delete 2>/dev/null; true", cwd="/", timeout=30)
        for p in sorted((tmp / "verifier").iterdir()):
            await agent.upload(p, f"{logs}/{p.name}")
    except (SandboxError, OSError):
        pass  # the logs are a convenience; the verdict is already in the result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def verify_trial(sandbox: Sandbox, task: Task, make: Callable[[Task], Sandbox],
                       timeout: float | None = None) -> VerifyResult:
    """`verify`, or `verify_separate` when the task asks for a separate verifier environment."""
    if task.verifier_separate:
        return await verify_separate(sandbox, task, make, timeout)
    return await verify(sandbox, task, timeout=timeout)

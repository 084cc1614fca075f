"""The `docker` backend: one container per trial over the Docker Engine API (aiodocker).

Works with Docker and with Podman's Docker-compatible service (`podman system service`). The image is
`image=` if given, else the task's `docker_image`, else built from environment/Dockerfile (tagged by a
hash of the build context, so trials of one task share it). The container keeps running
`sleep infinity`; commands are `docker exec`s; cleanup is by the `legorl.sandbox` label.
Needs the optional extra: `pip install legorl[docker]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tarfile
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from legorl.env import archive, remote
from legorl.env.archive import context_hash
from legorl.env.base import ExecResult, SandboxError, SandboxLifecycle
from legorl.env.output import DEFAULT_OUTPUT_CAP, CappedBuffer, tail
from legorl.tasks.model import Task

LABEL = "legorl.sandbox"


def _aiodocker() -> Any:
    try:
        import aiodocker
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise SandboxError("the docker backend needs aiodocker: pip install 'legorl[docker]'") from e
    return aiodocker


def container_config(task: Task, image: str, trial: str, network: bool, pids_limit: int) -> dict[str, Any]:
    """The create request: limits from the task, no network unless allowed, labelled for cleanup."""
    mem = task.limits.memory_mb * 1024 * 1024
    host: dict[str, Any] = {
        "NetworkMode": "bridge" if network else "none",
        "Memory": mem,
        "MemorySwap": mem,  # no swap on top
        "NanoCpus": int(task.limits.cpus * 1e9),
        "PidsLimit": pids_limit,
        "SecurityOpt": ["no-new-privileges"],
        "Init": False,
    }
    return {
        "Image": image,
        "Cmd": ["sleep", "infinity"],
        "WorkingDir": task.workdir,
        "Labels": {LABEL: "1", "legorl.task": task.id, "legorl.trial": trial},
        "HostConfig": host,
        "NetworkDisabled": not network,
    }


class DockerSandbox(SandboxLifecycle):
    """Sandbox in a Docker (or Podman) container. Options: url, image, pids_limit, output_cap, network."""

    def __init__(
        self,
        task: Task,
        *,
        url: str | None = None,
        image: str | None = None,
        pids_limit: int = 1024,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        network: bool | None = None,
    ) -> None:
        self.task = task
        self.url = url or os.environ.get("DOCKER_HOST")
        self.image = image
        self.pids_limit = pids_limit
        self.output_cap = output_cap
        self.network = task.limits.allow_internet if network is None else network
        self.trial = uuid.uuid4().hex[:12]
        self.docker: Any = None
        self.container: Any = None
        self._services: str | None = None  # pids up when the agent's phase began (enter_phase)

    async def start(self) -> None:
        aiodocker = _aiodocker()
        try:
            self.docker = aiodocker.Docker(url=self.url)
            await self.docker.version()
        except Exception as e:
            await self._close()
            raise SandboxError(f"cannot reach the Docker API at {self.url or 'default socket'}: {e}") from e
        try:
            image, upload_env = await self._image()
            cfg = container_config(self.task, image, self.trial, self.network, self.pids_limit)
            self.container = await self.docker.containers.create(cfg, name=f"legorl-{self.trial}")
            await self.container.start()
            dirs = f"mkdir -p {self.task.workdir} /logs/agent /logs/verifier"
            r = await self.exec(dirs, cwd="/", timeout=60)
            if not r.ok:
                raise SandboxError(f"container setup failed: {r.stderr.strip()}")
            if upload_env and self.task.environment_dir.is_dir():
                for p in sorted(self.task.environment_dir.iterdir()):
                    await self.upload(p, str(PurePosixPath(self.task.workdir) / p.name))
        except BaseException:
            await self.stop()
            raise

    async def _image(self) -> tuple[str, bool]:
        """(image, whether environment/ files still need uploading into the workdir)."""
        dockerfile = self.task.environment_dir / "Dockerfile"
        if self.image:
            return self.image, not dockerfile.is_file()
        if self.task.docker_image:
            await self._ensure_pulled(self.task.docker_image)
            return self.task.docker_image, False
        if not dockerfile.is_file():
            raise SandboxError(
                f"task {self.task.id}: the docker backend needs an image (image=..., task docker_image, "
                "or environment/Dockerfile)"
            )
        tag = f"legorl-{self.task.id.lower()[:40]}:{context_hash(self.task.environment_dir)}"
        with contextlib.suppress(Exception):
            await self.docker.images.inspect(tag)
            return tag, False
        ctx = io.BytesIO()
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            tar.add(str(self.task.environment_dir), arcname=".")
        ctx.seek(0)
        try:
            log = await asyncio.wait_for(
                self.docker.images.build(fileobj=ctx, encoding="application/x-tar", tag=tag, rm=True),
                self.task.build_timeout_sec,
            )
        except Exception as e:
            raise SandboxError(f"building {dockerfile} failed: {e}") from e
        try:
            await self.docker.images.inspect(tag)
        except Exception:  # the engine reports build errors in the log, not as an HTTP error
            lines = [str(m.get("error") or m.get("stream") or "") for m in (log or []) if isinstance(m, dict)]
            raise SandboxError(f"building {dockerfile} failed:\n{tail(''.join(lines), 2000)}") from None
        return tag, False

    async def _ensure_pulled(self, image: str) -> None:
        try:
            await self.docker.images.inspect(image)
        except Exception:
            try:
                await self.docker.images.pull(image)
            except Exception as e:
                raise SandboxError(f"cannot pull image {image}: {e}") from e

    async def _run(
        self, argv: list[str], cwd: str | None, env: dict[str, str] | None, timeout: float | None
    ) -> tuple[int | None, CappedBuffer, CappedBuffer, bool]:
        if self.container is None:
            raise SandboxError("sandbox is not started")
        ex = await self.container.exec(
            argv, stdout=True, stderr=True, workdir=cwd, environment=remote.env_list(env or {})
        )
        out, err = CappedBuffer(self.output_cap), CappedBuffer(self.output_cap)

        async def pump() -> None:
            async with ex.start(detach=False) as stream:
                while (msg := await stream.read_out()) is not None:
                    (out if msg.stream == 1 else err).write(msg.data)

        timed_out = False
        try:
            await asyncio.wait_for(pump(), timeout)
        except TimeoutError:
            timed_out = True
        info = await ex.inspect()
        return info.get("ExitCode"), out, err, timed_out

    async def exec(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        t0 = time.monotonic()
        argv, pidfile = remote.wrapped(cmd)
        limit = self.task.agent_timeout_sec if timeout is None else timeout
        code, out, err, timed_out = await self._run(argv, cwd, env, limit)
        if timed_out:
            await self._run(remote.kill_argv(pidfile), "/", None, 30)
        return ExecResult(
            exit_code=124 if timed_out else (code if code is not None else -1),
            stdout=out.text(),
            stderr=err.text(),
            duration_s=time.monotonic() - t0,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    async def enter_phase(self, phase: str) -> None:
        """The first phase after start (and the healthcheck): remember which processes the image runs."""
        if self._services is None and phase in ("agent", "solution"):
            code, out, _, _ = await self._run(["/bin/sh", "-c", remote.SNAPSHOT], "/", None, 30)
            self._services = out.text() if code == 0 else ""

    async def quiesce(self) -> None:
        """Kills the agent's leftover processes before verification (they outlive execs here), sparing
        the image's own services (`remote.quiesce_argv`)."""
        await self._run(remote.quiesce_argv(self._services), "/", None, 30)

    async def upload(self, src: Path, dst: str) -> None:
        p = PurePosixPath(dst)
        r = await self.exec(f"mkdir -p '{p.parent}'", cwd="/", timeout=60)
        if not r.ok:
            raise SandboxError(f"upload {src} -> {dst} failed: {tail(r.stderr)}")
        data = await asyncio.to_thread(archive.pack, Path(src), p.name)
        try:
            await self.container.put_archive(str(p.parent), data)
        except Exception as e:
            raise SandboxError(f"upload {src} -> {dst} failed: {e}") from e

    async def download(self, src: str, dst: Path) -> None:
        try:
            tar = await self.container.get_archive(src)
        except Exception as e:
            raise SandboxError(f"download {src} failed: {e}") from e
        with tempfile.TemporaryDirectory() as tmp:
            try:
                tar.extractall(tmp, filter="data")
            except tarfile.TarError as e:
                raise SandboxError(f"download {src} refused: {e}") from e
            await asyncio.to_thread(archive.place, Path(tmp) / PurePosixPath(src).name, Path(dst))


    async def stop(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                await self.container.delete(force=True)
            self.container = None
        await self._close()

    async def _close(self) -> None:
        if self.docker is not None:
            with contextlib.suppress(Exception):
                await self.docker.close()
            self.docker = None

    def describe(self) -> dict[str, object]:
        return {"backend": "docker", "url": self.url, "network": self.network, "trial": self.trial}


async def cleanup(url: str | None = None) -> int:
    """Removes every container a (possibly crashed) legorl run left behind; returns how many."""
    docker = _aiodocker().Docker(url=url or os.environ.get("DOCKER_HOST"))
    try:
        found = await docker.containers.list(all=True, filters={"label": [f"{LABEL}=1"]})
        for c in found:
            with contextlib.suppress(Exception):
                await c.delete(force=True)
        return len(found)
    finally:
        await docker.close()

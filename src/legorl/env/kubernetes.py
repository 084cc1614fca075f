"""The `kubernetes` backend: one pod per trial, commands over the exec API, cleanup by label.

The pod runs `sleep infinity` in the task's image with the task's cpu/memory/storage as limits, no
service-account token, and (unless the task allows internet) a per-trial NetworkPolicy that denies
all egress and ingress (enforced where the cluster's CNI supports policies). Files move as tar
through exec stdin, read with `head -c N` (the v4 exec protocol cannot signal end of input).
Connection: `host=` (e.g. a `kubectl proxy` URL), else in-cluster config, else kubeconfig.
Needs the optional extra: `pip install legorl[k8s]`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shlex
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from legorl.env import archive, remote
from legorl.env.base import ExecResult, SandboxError, SandboxLifecycle
from legorl.env.output import DEFAULT_OUTPUT_CAP, CappedBuffer, tail
from legorl.tasks.model import Task

MANAGED_BY = "app.kubernetes.io/managed-by"
SELECTOR = f"{MANAGED_BY}=legorl"
_MAX_INLINE = 16 * 1024  # longer commands are sent through stdin instead of the exec URL


def _k8s() -> Any:
    try:
        import kubernetes_asyncio
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise SandboxError(
            "the kubernetes backend needs kubernetes_asyncio: pip install 'legorl[k8s]'"
        ) from e
    return kubernetes_asyncio


def pod_manifest(
    task: Task, name: str, image: str, trial: str, extra_labels: dict[str, str]
) -> dict[str, Any]:
    """The pod for one trial: limits from the task, labelled for cleanup and for its NetworkPolicy."""
    limits = {"cpu": str(task.limits.cpus), "memory": f"{task.limits.memory_mb}Mi"}
    if task.limits.storage_mb:
        limits["ephemeral-storage"] = f"{task.limits.storage_mb}Mi"
    labels = {MANAGED_BY: "legorl", "legorl/trial": trial, **extra_labels}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {"legorl/task": task.id}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["sleep", "infinity"],
                    "workingDir": task.workdir,
                    "resources": {"limits": limits, "requests": dict(limits)},
                    "securityContext": {"allowPrivilegeEscalation": False},
                }
            ],
        },
    }


def deny_all_policy(name: str, trial: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": {MANAGED_BY: "legorl", "legorl/trial": trial}},
        "spec": {
            "podSelector": {"matchLabels": {"legorl/trial": trial}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


async def _configuration(host: str | None, kubeconfig: str | None, context: str | None) -> Any:
    k8s = _k8s()
    cfg = k8s.client.Configuration(host=host) if host else k8s.client.Configuration()
    if host:
        return cfg
    try:
        k8s.config.load_incluster_config(client_configuration=cfg)
    except Exception:
        try:
            await k8s.config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        except Exception as e:
            raise SandboxError(f"no Kubernetes configuration (in-cluster or kubeconfig): {e}") from e
    return cfg


class KubernetesSandbox(SandboxLifecycle):
    """Sandbox in a pod. Options: image, namespace, host, kubeconfig, context, labels, startup_timeout."""

    def __init__(
        self,
        task: Task,
        *,
        image: str | None = None,
        namespace: str = "default",
        host: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        labels: dict[str, str] | None = None,
        startup_timeout: float = 300.0,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        network: bool | None = None,
    ) -> None:
        self.task = task
        self.image = image or task.docker_image
        self.namespace = namespace
        self.host, self.kubeconfig, self.context = host, kubeconfig, context
        self.labels = labels or {}
        self.startup_timeout = startup_timeout
        self.output_cap = output_cap
        self.network = task.limits.allow_internet if network is None else network
        self.trial = uuid.uuid4().hex[:12]
        self.name = f"legorl-{self.trial}"
        self._services: str | None = None  # pids up when the agent's phase began (enter_phase)
        self.cfg: Any = None
        self.api: Any = None
        self.pod_created = self.policy_created = False

    async def start(self) -> None:
        if not self.image:
            raise SandboxError(
                f"task {self.task.id}: the kubernetes backend needs an image (image= or docker_image)"
            )
        k8s = _k8s()
        self.cfg = await _configuration(self.host, self.kubeconfig, self.context)
        self.api = k8s.client.ApiClient(self.cfg)
        core = k8s.client.CoreV1Api(self.api)
        try:
            if not self.network:
                await k8s.client.NetworkingV1Api(self.api).create_namespaced_network_policy(
                    self.namespace, deny_all_policy(self.name, self.trial)
                )
                self.policy_created = True
            body = pod_manifest(self.task, self.name, self.image, self.trial, self.labels)
            await core.create_namespaced_pod(self.namespace, body)
            self.pod_created = True
            await self._wait_running(core)
            r = await self.exec(
                f"mkdir -p {self.task.workdir} /logs/agent /logs/verifier", cwd="/", timeout=60
            )
            if not r.ok:
                raise SandboxError(f"pod setup failed: {r.stderr.strip()}")
            if (
                self.task.environment_dir.is_dir()
                and not (self.task.environment_dir / "Dockerfile").is_file()
            ):
                for p in sorted(self.task.environment_dir.iterdir()):
                    await self.upload(p, str(PurePosixPath(self.task.workdir) / p.name))
        except BaseException:
            await self.stop()
            raise

    async def _wait_running(self, core: Any) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            pod = await core.read_namespaced_pod(self.name, self.namespace)
            phase = pod.status.phase if pod.status else None
            if phase == "Running":
                return
            if phase in ("Failed", "Succeeded"):
                raise SandboxError(f"pod {self.name} ended before it was used: {phase}")
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"pod {self.name} not running after {self.startup_timeout:.0f}s (phase {phase})"
                )
            await asyncio.sleep(0.5)

    async def _run(
        self,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str] | None,
        timeout: float | None,
        cap: int,
        stdin: bytes | None = None,
    ) -> tuple[int, CappedBuffer, CappedBuffer, bool]:
        """One exec over the websocket (v4 protocol: channel byte + payload). `stdin` is sent whole;
        the command must read exactly its length (`head -c N`), since v4 cannot signal EOF."""
        if self.api is None:
            raise SandboxError("sandbox is not started")
        k8s = _k8s()
        if cwd or env:  # the exec API has neither: set them in the shell
            prefix = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
            argv = ["/bin/sh", "-c", f'cd "$0" && exec env {prefix} "$@"', cwd or ".", *argv]
        out, err = CappedBuffer(cap), CappedBuffer(cap)
        code = -1
        async with k8s.stream.WsApiClient(self.cfg) as ws_api:
            core = k8s.client.CoreV1Api(ws_api)

            async def pump() -> int:
                ctx = await core.connect_get_namespaced_pod_exec(
                    self.name,
                    self.namespace,
                    command=argv,
                    stdout=True,
                    stderr=True,
                    stdin=stdin is not None,
                    tty=False,
                    _preload_content=False,
                )
                rc = -1
                async with ctx as ws:
                    for i in range(0, len(stdin or b""), 1 << 16):
                        await ws.send_bytes(b"\x00" + (stdin or b"")[i : i + (1 << 16)])
                    async for msg in ws:
                        data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                        if len(data) < 1:
                            continue
                        ch, payload = data[0], data[1:]
                        if ch == 1:
                            out.write(payload)
                        elif ch == 2:
                            err.write(payload)
                        elif ch == 3 and payload:
                            rc = k8s.stream.WsApiClient.parse_error_data(payload)
                return rc

            try:
                code = await asyncio.wait_for(pump(), timeout)
                return code, out, err, False
            except TimeoutError:
                return 124, out, err, True

    async def exec(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        t0 = time.monotonic()
        script = None
        if len(cmd.encode()) > _MAX_INLINE:  # the command travels in the URL: long ones go by stdin
            script = f"/tmp/.legorl-cmd-{uuid.uuid4().hex[:8]}"
            await self._put(cmd.encode(), script)
            cmd = f"bash {script}; rc=$?; rm -f {script}; exit $rc"
        argv, pidfile = remote.wrapped(cmd)
        limit = self.task.agent_timeout_sec if timeout is None else timeout
        code, out, err, timed_out = await self._run(argv, cwd, env, limit, self.output_cap)
        if timed_out:
            await self._run(remote.kill_argv(pidfile), "/", None, 30, 4096)
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            duration_s=time.monotonic() - t0,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    async def enter_phase(self, phase: str) -> None:
        """The first phase after start (and the healthcheck): remember which processes the image runs."""
        if self._services is None and phase in ("agent", "solution"):
            code, out, _, _ = await self._run(["/bin/sh", "-c", remote.SNAPSHOT], "/", None, 30, 4096)
            self._services = out.text() if code == 0 else ""

    async def quiesce(self) -> None:
        """Kills the agent's leftover processes before verification (they outlive execs here), sparing
        the image's own services (`remote.quiesce_argv`)."""
        await self._run(remote.quiesce_argv(self._services), "/", None, 30, 4096)

    async def _put(self, data: bytes, path: str, then: str = "") -> None:
        """Writes `data` to `path` in the pod through exec stdin, then runs `then` on it."""
        step = f"head -c {len(data)} > {shlex.quote(path)}" + (f" && {then}" if then else "")
        code, _, err, _ = await self._run(["/bin/sh", "-c", step], "/", None, 300, 1 << 16, stdin=data)
        if code != 0:
            raise SandboxError(f"writing {path} in pod {self.name} failed: {tail(err.text())}")

    async def upload(self, src: Path, dst: str) -> None:
        p = PurePosixPath(dst)
        data = await asyncio.to_thread(archive.pack, Path(src), p.name)
        tmp = f"/tmp/.legorl-up-{uuid.uuid4().hex[:8]}"
        parent = shlex.quote(str(p.parent))
        untar = (
            f"mkdir -p {parent} && tar -x --no-same-owner -C {parent} -f {tmp}; rc=$?; rm -f {tmp}; exit $rc"
        )
        try:
            await self._put(data, tmp, untar)
        except SandboxError as e:
            raise SandboxError(f"upload {src} -> {dst} failed: {e}") from e

    async def download(self, src: str, dst: Path) -> None:
        p = PurePosixPath(src)
        code, out, err, _ = await self._run(
            ["/bin/sh", "-c", f"tar -c -C '{p.parent}' -f - -- '{p.name}' | base64 -w0"],
            "/",
            None,
            300,
            1 << 30,
        )
        if code != 0 or out.truncated:
            raise SandboxError(f"download {src} failed: {'too large' if out.truncated else tail(err.text())}")
        try:
            await asyncio.to_thread(archive.unpack, base64.b64decode(out.getvalue()), p.name, Path(dst))
        except Exception as e:
            raise SandboxError(f"download {src} refused: {e}") from e

    async def stop(self) -> None:
        if self.api is not None:
            k8s = _k8s()
            if self.pod_created:
                with contextlib.suppress(Exception):
                    await k8s.client.CoreV1Api(self.api).delete_namespaced_pod(
                        self.name, self.namespace, grace_period_seconds=0
                    )
            if self.policy_created:
                with contextlib.suppress(Exception):
                    await k8s.client.NetworkingV1Api(self.api).delete_namespaced_network_policy(
                        self.name, self.namespace
                    )
            self.pod_created = self.policy_created = False
            with contextlib.suppress(Exception):
                await self.api.close()
            self.api = None


    def describe(self) -> dict[str, object]:
        return {
            "backend": "kubernetes",
            "namespace": self.namespace,
            "pod": self.name,
            "network": self.network,
        }


async def cleanup(namespace: str = "default", host: str | None = None, kubeconfig: str | None = None) -> None:
    """Deletes every pod and NetworkPolicy a (possibly crashed) legorl run left in `namespace`."""
    k8s = _k8s()
    cfg = await _configuration(host, kubeconfig, None)
    async with k8s.client.ApiClient(cfg) as api:
        await k8s.client.CoreV1Api(api).delete_collection_namespaced_pod(
            namespace, label_selector=SELECTOR, grace_period_seconds=0
        )
        await k8s.client.NetworkingV1Api(api).delete_collection_namespaced_network_policy(
            namespace, label_selector=SELECTOR
        )

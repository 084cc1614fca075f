"""`kill <legorl train>` (SIGTERM, as a job scheduler stops a job) stops what the run started.

A vLLM server runs in its own process group, so a trainer that died of SIGTERM's default action used to leave it
running, holding its memory (on a GPU: the whole card). The executable here is a stand-in that never gets
healthy (a real vLLM start costs ~40 s and is not what is under test); it writes its pid so the test can see
whether it outlived the run."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, the killed run, is the one to reap it)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def test_sigterm_stops_the_vllm_server_the_run_started(tmp_path, tiny_run_config):
    exe = tmp_path / "vllm"
    pid_file = tmp_path / "server.pid"
    exe.write_text(f"#!/bin/bash\necho $$ > {pid_file}\nexec sleep 600\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    cfg = tiny_run_config("t", trainer={"total_steps": 1})
    run = subprocess.Popen([sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress",
                            "serving.engine=vllm", f"serving.vllm.executable={exe}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = None
    try:
        deadline = time.monotonic() + 120
        while not pid_file.is_file() or not pid_file.read_text().strip():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-2000:]
            time.sleep(0.2)
        server = int(pid_file.read_text())
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=60)[0]
        assert run.returncode == 130, out[-2000:]  # unwound as Ctrl-C is
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), "the vLLM server outlived the run"
    finally:
        if run.poll() is None:
            run.kill()
        if server is not None and _alive(server):
            os.kill(server, signal.SIGKILL)

"""The trial mount helper as a small C program (overlay_exec.c), built once per machine.

Every exec of a trial over an image layer (env/rootfs.py) starts with a helper that mounts the layer's system
dirs read-only and drops to the trial's uid before bubblewrap. As `python -I -S overlay_helper.py` that start
cost ~12 ms of CPU an exec; a look-act trial makes ~12 execs (its commands, the verifier, file copies), so on 2
cores the interpreters took ~7% of a training run's CPU from the engines (`perf record` of `legorl train`,
2026-12-06). The C twin does the same steps in the same order and fails the same way (exit 125, one
"legorl overlay: ..." line). It is compiled with the system C compiler (`$CC`, else cc / gcc / clang) into
`$LEGORL_HOME/bin/` under a hash of its source and compiler; without a compiler, or when the build fails, the
Python helper runs as before. `LEGORL_OVERLAY_HELPER=python` picks the Python helper. Layer builds (`--build`)
always use the Python helper: they run once per layer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from legorl.models.home import legorl_home

SOURCE = Path(__file__).with_name("overlay_exec.c")
PYTHON_HELPER = Path(__file__).with_name("overlay_helper.py")
log = logging.getLogger(__name__)


def python_helper() -> tuple[str, ...]:
    """The helper as a Python script (both modes): the fallback, and how layers are built."""
    return (sys.executable, "-I", "-S", str(PYTHON_HELPER))


@functools.cache
def trial_helper() -> tuple[str, ...]:
    """The argv prefix of the trial helper: the compiled one when it builds here, else the Python one."""
    if os.environ.get("LEGORL_OVERLAY_HELPER") == "python":
        return python_helper()
    try:
        return (str(build()),)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        log.info("the trial helper did not compile (%s): layered trials start Python for each exec", exc)
        return python_helper()


def build() -> Path:
    """The compiled helper, built on first use (atomically: concurrent builders each rename a whole file)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (set $CC, or install gcc)")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode()).hexdigest()[:16]
    out = legorl_home() / "bin" / f"legorl-overlay-{key}"
    if os.access(out, os.X_OK):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".build-")
    os.close(fd)
    try:
        done = subprocess.run([cc, "-O2", "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{cc} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return out

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

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path

from legorl.native import BuildError, c_compiler, cached_build

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
    except (OSError, subprocess.SubprocessError, BuildError) as exc:
        log.info("the trial helper did not compile (%s): layered trials start Python for each exec", exc)
        return python_helper()


def build() -> Path:
    """The compiled helper, built on first use (legorl/native.py: cached per source and compiler)."""
    cc = c_compiler()
    if cc is None:
        raise BuildError("no C compiler (set $CC, or install gcc)")
    return cached_build(cc, "bin", "legorl-overlay", [SOURCE.read_text()],
                        lambda _tmp, out: [[cc, "-O2", "-o", str(out), str(SOURCE)]])

"""Mounts a copy-on-write root for one command, then runs it: the local backend's image layer.

Run as root by `legorl.env.rootfs` (`python -I -S overlay_helper.py ...`), never imported: it
must start fast and depend on nothing. In a private mount namespace it mounts overlayfs with the
host root as the lowest layer, then either
- `--build`: forks a child into a new user namespace whose ids map 1:1 onto the host's first
  65536 (so apt, useradd and chown work) and execs the command there — root inside, with
  capabilities only over that namespace, writing into `--upper`; or
- `--uid/--gid`: mounts each `--ro DIR=LOWER:LOWER...` read-only (a layer's /usr over the host's
  /usr...: lowers must not nest, so each system dir is its own overlay), drops to the trial's
  unprivileged uid and execs (bubblewrap). This mode runs at every exec of a layered trial, so
  overlay_exec.c does the same in C where a compiler is (env/overlay_exec.py); this one is the
  fallback, and the two must stay in step (tests/env/test_overlay_exec.py).
bubblewrap 0.8 has no overlay options, so this is the overlay.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REC, MS_PRIVATE = 0x1, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


def _die(what: str) -> None:
    err = ctypes.get_errno()
    sys.stderr.write(f"legorl overlay: {what}: {os.strerror(err)}\n")
    os._exit(125)


def _mount(src: str, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
    if _libc.mount(src.encode(), dst.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        _die(f"mount {fstype or src} on {dst}")


def _args(argv: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    opts: dict[str, str] = {}
    ro: list[str] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        key = argv[i].lstrip("-")
        if key == "build":
            opts[key] = "1"
            i += 1
        elif key == "ro":
            ro.append(argv[i + 1])
            i += 2
        else:
            opts[key] = argv[i + 1]
            i += 2
    return opts, ro, argv[i + 1:]


def _userns_exec(cmd: list[str]) -> None:
    """Runs cmd in a fresh user namespace mapped 1:1 onto host ids 0-65535; exits with its status."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w1)
        os.close(r2)
        if _libc.unshare(CLONE_NEWUSER) != 0:
            _die("unshare(user)")
        os.write(w2, b"1")
        os.read(r1, 1)  # the parent has written our id maps
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        os.execv(cmd[0], cmd)
    os.close(r1)
    os.close(w2)
    os.read(r2, 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write("0 0 65536\n")
    os.write(w1, b"1")
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def main() -> None:
    opts, ro, cmd = _args(sys.argv[1:])
    if _libc.unshare(CLONE_NEWNS) != 0:
        _die("unshare(mount)")
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    if "build" in opts:
        data = f"lowerdir=/,upperdir={opts['upper']},workdir={opts['work']}"
        _mount("overlay", opts["merged"], "overlay", 0, data)
        _userns_exec(cmd)
    for spec in ro:
        target, _, lowers = spec.partition("=")
        _mount("overlay", target, "overlay", MS_RDONLY, f"lowerdir={lowers}")
    uid, gid = int(opts["uid"]), int(opts["gid"])
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()

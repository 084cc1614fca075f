"""In-sandbox init + relay: the agent's only way out of an empty network namespace.

Runs *inside* the sandbox under the system `/usr/bin/python3` (standard library only, no legorl), as
the namespace's pid 1:

    python3 bridge_relay.py SOCKET PORT -- agent argv...

It listens on 127.0.0.1:PORT, forwards every connection to the unix socket SOCKET (bound in from
the host, where `legorl.agents.bridge_net.HostRelay` answers for exactly one proxy session), starts
the agent as its child, reaps orphans like an init, and exits with the agent's status. When it
exits the kernel kills everything else in the namespace, so nothing the agent started survives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _serve(listener: socket.socket, target: str) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(target)
        except OSError as exc:
            print(f"legorl relay: cannot reach the host side: {exc}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def _reap(agent: int) -> None:
    """Init duty: reap every child; when the agent itself ends, end the namespace with its status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except (ChildProcessError, InterruptedError):
            time.sleep(0.05)
            continue
        if pid == agent:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: bridge_relay.py SOCKET PORT -- CMD...", file=sys.stderr)
        sys.exit(2)
    target, port, cmd = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))  # bound before the agent starts: its first call finds it
    listener.listen(64)
    listener.setblocking(False)
    agent = os.fork()
    if agent == 0:
        listener.close()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            print(f"legorl relay: cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    threading.Thread(target=_reap, args=(agent,), daemon=True).start()
    asyncio.run(_serve(listener, target))


if __name__ == "__main__":
    main(sys.argv[1:])

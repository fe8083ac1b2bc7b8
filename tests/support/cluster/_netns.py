"""Run one command in a network namespace of its own that reaches the host's API server.

Why: Knative's controller serves its health probes on a fixed ``:8080`` (knative.dev/pkg
``injection/health_check.go``, ``HealthCheckDefaultPort``, used by
``injection/sharedmain/main.go``) and its autoscaler its stats server on a fixed
``:8080`` (knative.dev/serving ``cmd/autoscaler/main.go``, ``statsServerAddr``), each on
every interface: in a cluster each is a pod with its own network, here two processes on
one host would collide, and either would hold the port a developer's ``make run`` uses.
So each runs in a namespace of its own, where it has a loopback only, and reaches the API
server through a relay: inside, ``127.0.0.1:<port>`` (the API server's own address, so
its certificate still matches); across, a Unix socket, since a path-bound Unix socket is
not scoped by network namespace (unix(7)); outside, the API server.

    python -m tests.support.cluster._netns --port P --server 127.0.0.1:P --socket S -- CMD...

The process forks: the parent stays in the host's namespace and relays the socket to the
server; the child enters a new namespace (unshare(2) ``CLONE_NEWNET``, with
``CLONE_NEWUSER`` when not root), brings its loopback up, relays ``127.0.0.1:P`` to the
socket, and runs CMD. They share one process group, so stopping the parent's group by PID
stops all three. Outbound calls to anything else fail at once (no route), which is what a
pod with no data plane to reach would see sooner or later.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
CHUNK = 1 << 16


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  connect: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
                  ) -> None:
    try:
        far_reader, far_writer = await connect
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pump(reader, far_writer), _pump(far_reader, writer))


async def _relay_unix_to_tcp(path: str, host: str, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _splice(reader, writer, asyncio.ensure_future(asyncio.open_connection(host, port)))

    server = await asyncio.start_unix_server(handle, path=path)
    async with server:
        await server.serve_forever()


async def _relay_tcp_to_unix(port: int, path: str, argv: list[str]) -> int:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _splice(reader, writer, asyncio.ensure_future(asyncio.open_unix_connection(path)))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        proc = await asyncio.create_subprocess_exec(*argv)
        return await proc.wait()


def _unshare_net() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET if uid == 0 else CLONE_NEWNET | CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
    if uid != 0:  # map ourselves to root in the new user namespace (user_namespaces(7))
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # netdevice(7)
        fcntl.ioctl(s, SIOCSIFFLAGS,
                    struct.pack("16sH", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


def available() -> str | None:
    """None when this machine can run a command here, else why not."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import _netns; _netns._unshare_net()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True,
                        help="the port inside the namespace that reaches the server")
    parser.add_argument("--server", required=True, help="HOST:PORT on the host")
    parser.add_argument("--socket", required=True, help="the Unix socket between the two")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    opts = parser.parse_args(args)
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    host, _, port = opts.server.rpartition(":")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(opts.socket)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_w)
        os.read(ready_r, 1)  # the parent's socket is listening
        _unshare_net()
        code = asyncio.run(_relay_tcp_to_unix(opts.port, opts.socket, argv))
        os._exit(code)
    os.close(ready_r)

    def stop(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)

    async def parent() -> int:
        relay = asyncio.ensure_future(_relay_unix_to_tcp(opts.socket, host, int(port)))
        while not os.path.exists(opts.socket):
            await asyncio.sleep(0.01)
        os.write(ready_w, b"1")
        loop = asyncio.get_running_loop()
        _, status = await loop.run_in_executor(None, os.waitpid, child, 0)
        relay.cancel()
        return os.waitstatus_to_exitcode(status)

    return asyncio.run(parent())


if __name__ == "__main__":
    sys.exit(main())

"""The grader's side of ``runner/fork_server.py``: one warm parent per kernel slot and
student edition, kept for a batch, that forks each notebook's cases interpreter.

``fresh.run`` starts a new sandboxed Python for every notebook; PyTorch's import is then
a second or two of CPU per notebook, which on a machine whose cores all run kernels is
the batch's time. ``ForkServers.run`` gives the same report from a child of a warm
server started in the same sandbox view (the same command, limits, memory cgroup and
watches as ``fresh``), so the child is as fresh as a new interpreter: its parent never
ran anything of a student's.

Whatever looks wrong costs the server, never the next notebook: a job that times out,
sends frames that cannot be read, goes over a limit (memory, disk, the cgroup's), or
after which the server does not answer ``DONE`` within ``DONE_SECONDS``, or answers that
something was left behind, ends with the server killed (the whole sandbox); the next
notebook of that slot starts a new one. A slot keeps at most ``PER_SLOT`` servers (the
most recently used; the batch hands a slot the notebooks of the assignment it graded
last, ``batch._Slots``). ``close()`` at the end of the batch stops them all.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import struct

from . import disk
from .fresh import _Frames, kill, read_frames, request_bytes, watch_cases
from ..runner.fork_server import DONE, FORK, READY

_MODULE = "transformer_grader.runner.fork_server"
DONE_SECONDS = 10.0
PER_SLOT = 3  # warm servers kept per slot (each holds PyTorch: ~200 MB)


class _Server:
    """One running fork server: its process, socket, private folder and log."""

    def __init__(self, process, sock, private, log):
        self.process, self.sock, self.private, self.log = process, sock, private, log

    def alive(self) -> bool:
        return self.process.returncode is None


def _receive(sock: socket.socket, size: int, timeout: float):
    """(bytes, fds) of exactly ``size`` bytes from ``sock`` (blocking, in a thread)."""
    sock.settimeout(timeout)
    data, fds = b"", []
    while len(data) < size:
        chunk, got, _, _ = socket.recv_fds(sock, size - len(data), 4)
        fds += got
        if not chunk:
            raise EOFError("the fork server closed its socket")
        data += chunk
    return data, fds


class ForkServers:
    """The fork servers of one batch, by (slot, edition)."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.servers: dict[tuple[int, str], _Server] = {}

    async def _start(
        self, edition, slot: int, startup_timeout: float, imports=()
    ) -> _Server:
        sandbox = self.sandbox
        private = sandbox.private_folder(f"fork-{slot}-{secrets.token_hex(4)}", slot)
        warm = [x for name in imports for x in ("--import", str(name))]
        argv = sandbox.command(
            private, edition, slot, ["-P", "-m", _MODULE, "--sandboxed", *warm]
        )
        ours, theirs = socket.socketpair()
        log = open(private / "runner.log", "ab")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=theirs,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                env=sandbox.outer_env(),
            )
        except BaseException:
            ours.close()
            log.close()
            sandbox.release(private)
            disk.remove(private)
            raise
        finally:
            theirs.close()
        server = _Server(process, ours, private, log)
        try:
            said, fds = await asyncio.to_thread(
                _receive, ours, len(READY), startup_timeout
            )
            for fd in fds:
                os.close(fd)
            if said != READY:
                raise ValueError("the fork server did not start")
        except BaseException:
            await self._stop(server)
            raise
        return server

    async def _stop(self, server: _Server) -> str | None:
        """Kill ``server`` (its whole sandbox) and clean up; what its cgroup saw."""
        kill(server.process)
        await server.process.wait()
        server.sock.close()
        server.log.close()
        over = self.sandbox.release(server.private)
        disk.remove(server.private)
        return over

    async def run(
        self,
        definitions: list[dict],
        tasks: list[dict],
        *,
        edition,
        slot: int,
        timeout: float,
        startup_timeout: float,
        **_,
    ) -> tuple[dict | None, str]:
        """As ``fresh.run``: (report or None, why it is missing or incomplete)."""
        key = (slot, str(edition))
        server = self.servers.pop(key, None)
        if server is not None and not server.alive():
            await self._stop(server)
            server = None
        if server is None:
            try:
                imports = sorted({m for item in tasks for m in item.get("imports", ())})
                server = await self._start(edition, slot, startup_timeout, imports)
            except (OSError, ValueError, EOFError) as error:
                return None, f"the checks of your functions could not start ({error})"
        try:
            keep, result = await self._job(server, definitions, tasks, timeout)
        except BaseException:  # the batch was interrupted: the server goes with it
            await self._stop(server)
            raise
        if keep:
            self.servers[key] = server  # (last in the dict: the most recently used)
            mine = [k for k in self.servers if k[0] == slot]
            for old in mine[: max(0, len(mine) - PER_SLOT)]:  # the least recently used
                await self._stop(self.servers.pop(old))
        else:
            over = await self._stop(server)
            if over is not None:
                return None, f"stopped: the checks of your functions: {over}"
        return result

    async def _job(self, server: _Server, definitions, tasks, timeout):
        """One notebook's cases on ``server``: (keep the server?, (report, problem))."""
        from .kernel import _stop_watching

        frames, request = _Frames(), request_bytes(definitions, tasks)
        os.ftruncate(server.log.fileno(), 0)  # (opened to append) this job's only
        watchers = watch_cases(server.process, server.private, self.sandbox.limits)
        problem, done = "", b""
        try:
            try:
                await asyncio.to_thread(
                    server.sock.sendall, struct.pack(">Q", len(request)) + request
                )
                said, fds = await asyncio.to_thread(
                    _receive, server.sock, len(FORK), DONE_SECONDS
                )
                if said != FORK or len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    raise ValueError("the fork server did not fork")
            except (OSError, ValueError, EOFError) as error:
                why = f"the checks of your functions could not start ({error})"
                return False, (None, why)
            pipe = os.fdopen(fds[0], "rb", buffering=0)
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=2**20)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
            try:
                problem = await read_frames(frames, reader, timeout, 0.0)
            finally:
                transport.close()
            if not problem:
                try:
                    done, fds = await asyncio.to_thread(
                        _receive, server.sock, len(DONE) + 1, DONE_SECONDS
                    )
                    for fd in fds:
                        os.close(fd)
                except (OSError, EOFError):
                    done = b""
        finally:
            if problem:  # the child may still run: the whole server goes
                kill(server.process)
            overused = await _stop_watching(watchers)
        if overused is not None:
            return False, (None, f"stopped: the checks of your functions: {overused}")
        over = self.sandbox.over(server.private)
        if over is not None:
            return False, (None, f"stopped: the checks of your functions: {over}")
        keep = not problem and done == DONE + b"1" and server.alive()
        return keep, (frames.report, problem)

    async def close(self) -> None:
        """Stop every server (the end of the batch)."""
        servers, self.servers = list(self.servers.values()), {}
        for server in servers:
            await self._stop(server)

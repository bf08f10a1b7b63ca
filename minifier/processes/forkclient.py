"""The driver's end of a fork server (minifier.processes.forkserver): start or find one, spawn workers from it.

Workers are not the driver's children, so the driver cannot wait for them; the fork server reports
each one's exit status on the connection that spawned it, and `Forked` turns that back into the
`poll`/`wait`/`kill` a `subprocess.Popen` offers. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import time
from collections import deque
from collections.abc import Mapping

from ..contract.interrupts import held
from ..contract.procs import kill_worker, peer_uid
from ..contract.wire import WireError
from ..exchange import fork_protocol as fp

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # minifier/


class ForkServerGone(RuntimeError):
    """The fork server exited or cannot be reached; the message says what its log says."""


class Forked:
    """A worker forked by the fork server, seen from the driver. Spawns are pipelined: its pid arrives
    with the server's answer, which is awaited only when the pid is needed."""

    def __init__(self, server: ForkServer, timeout: float) -> None:
        self.server = server
        self.timeout = timeout
        self.answer: fp.Spawned | fp.Refused | None = None

    @property
    def pid(self) -> int:
        while self.answer is None:
            if self.server.receive(self.timeout, until=(fp.Spawned, fp.Refused)) is None:
                raise ForkServerGone(f"the fork server did not answer a spawn within {self.timeout:.0f} s")
        if isinstance(self.answer, fp.Refused):
            raise ForkServerGone(self.answer.message)
        return self.answer.pid

    @property
    def prepared(self) -> bool | None:
        """Whether it was forked after the server was prepared (fork_protocol.Prepared); None while unknown."""
        return self.answer.prepared if isinstance(self.answer, fp.Spawned) else None

    def poll(self) -> int | None:
        try:
            self.server.receive(timeout=0)
        except ForkServerGone:
            return self.wait()
        if self.answer is None:
            return None  # not forked yet: as good as running
        return self.server.exits.get(self.pid)

    def wait(self) -> int:
        try:
            pid = self.pid
            while pid not in self.server.exits:
                self.server.receive(timeout=None, until=fp.Exited)
            return self.server.exits[pid]
        except ForkServerGone:  # the next spawn reports that; a worker's parent-watch kills it like this
            return -signal.SIGKILL

    def kill(self) -> None:
        try:
            kill_worker(self.pid)
        except ForkServerGone:
            pass


class ForkServer:
    def __init__(self, sock: socket.socket, process: subprocess.Popen | None = None) -> None:
        self.sock = sock
        self.process = process
        self.exits: dict[int, int] = {}
        self.unanswered: deque[Forked] = deque()
        self.pid = 0
        self.prepared = False  # a worker forked from now on inherits every import and probe (fork_protocol)
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)

    @classmethod
    def private(cls, python: str, env: Mapping[str, str], log_path: str, timeout: float) -> ForkServer:
        """A server for this driver alone: it exits when the driver closes (or loses) the connection."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        process = _start(python, ["--fd", str(theirs.fileno())], env, log_path, pass_fds=(theirs.fileno(),))
        theirs.close()
        server = cls(ours, process)
        server.hello(timeout)
        return server

    @classmethod
    def shared(
        cls, python: str, env: Mapping[str, str], log_path: str, timeout: float, idle: float, owner: int
    ) -> ForkServer:
        """The server kept warm for this environment (started if there is none): it outlives this
        driver by up to `idle` seconds, and never outlives process `owner`."""
        name = shared_name(python, env, owner)
        for _ in range(2):  # a server that was just then exiting for idleness: start a new one
            sock = _connect(name)
            if sock is None:
                _start(python, ["--name", name, "--idle", f"{idle:g}", "--owner", str(owner)], env, log_path)
                sock = _connect(name, wait=min(timeout, 60.0))
            if sock is None:
                break
            if peer_uid(sock) != os.getuid():
                sock.close()
                raise ForkServerGone(f"the fork server name {name!r} is held by another user")
            server = cls(sock)
            try:
                server.hello(timeout)
                return server
            except ForkServerGone:
                server.close()
        raise ForkServerGone("could not start or reach the worker fork server")

    def hello(self, timeout: float) -> None:
        message = self.receive(timeout, until=fp.Hello)
        if not isinstance(message, fp.Hello):
            raise ForkServerGone(f"the worker fork server was not ready within {timeout:.0f} s")
        self.pid, self.prepared = message.pid, message.prepared

    def spawn(self, env: Mapping[str, str], cwd: str, fds: tuple[int, int, int], timeout: float) -> Forked:
        """Ask for a worker without waiting: a pool's workers are all asked for at once, and the server
        forks them all before it goes on importing."""
        forked = Forked(self, timeout)
        with held():  # the server answers spawns in order: each one sent is awaited
            try:
                socket.send_fds(self.sock, [fp.encode(fp.Spawn(env=dict(env), cwd=cwd))], list(fds))
            except OSError as e:
                raise ForkServerGone(self._gone(f"cannot reach it ({e})")) from e
            self.unanswered.append(forked)
        return forked

    def receive(self, timeout: float | None, until: type | tuple[type, ...] = ()) -> fp.Message | None:
        """Read what the server sends within `timeout`, recording exits; return the first `until` message
        (None when the time is up)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.selector.select(left):
                return None
            with held():  # a message read is recorded before a cancel can be raised
                message = self._read()
                if isinstance(message, fp.Exited):
                    self.exits[message.pid] = message.returncode
                elif isinstance(message, fp.Prepared):
                    self.prepared = True
                elif isinstance(message, (fp.Spawned, fp.Refused)) and self.unanswered:
                    self.unanswered.popleft().answer = message  # the server answers spawns in order
            if until and isinstance(message, until):
                return message

    def _read(self) -> fp.Message:
        try:
            record = self.sock.recv(fp.MAX_RECORD)
        except OSError:
            record = b""
        if not record:
            raise ForkServerGone(self._gone("it exited"))
        try:
            return fp.decode(record)
        except WireError as e:
            raise ForkServerGone(self._gone(str(e))) from e

    def close(self) -> None:
        self.selector.close()
        self.sock.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _gone(self, why: str) -> str:
        status = ""
        if self.process is not None and self.process.poll() is not None:
            status = f" (status {self.process.returncode})"
        return f"the worker fork server is gone: {why}{status}"


def shared_name(python: str, env: Mapping[str, str], owner: int) -> str:
    """One warm server per interpreter, environment (Inductor reads some settings at import time),
    version of this package's code, and owner."""
    stamp = max(
        os.stat(os.path.join(folder, f)).st_mtime_ns
        for folder, _, files in os.walk(PACKAGE_DIR)
        for f in files
        if f.endswith(".py")
    )
    key = json.dumps([python, sorted(env.items()), stamp, owner])
    return f"aoti-lens-forkserver-{os.getuid()}-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def _start(
    python: str, args: list[str], env: Mapping[str, str], log_path: str, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    # cwd "/": a server kept warm must not pin the first run's folder
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [python, "-m", "minifier.processes.forkserver", *args],
            pass_fds=pass_fds,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )


def _connect(name: str, wait: float = 0.0) -> socket.socket | None:
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect("\0" + name)
            return sock
        except OSError:
            sock.close()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)

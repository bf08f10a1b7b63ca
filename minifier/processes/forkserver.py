"""The fork server: imports torch, Inductor and torch.export once, then forks workers on request.

A cold `import torch` with Inductor takes longer than compiling a small failing graph twice; a worker
forked from a process that has already paid it starts at once.
It says Hello once torch is in, and imports the rest (Inductor, Triton) between requests, so a cold
run's first workers do not wait for imports they can make themselves meanwhile. First of all it has a
child run Inductor's CPU vector ISA probe, which each process's first AOTI compile would run (on a GPU
machine, most of a fresh worker's first passing compile), beside those imports: the original's compile waits for
its answer. Once it has adopted the answer (minifier/processes/cpu_isa.py) and made its imports it says Prepared:
the driver forks its idle early workers again, so that they inherit it all, and busy ones read the answer
from the file every worker holds. This process never
touches CUDA (a CUDA context does not survive fork): each worker sets its own CUDA_VISIBLE_DEVICES and
creates its context after the fork.

    python -m minifier.processes.forkserver --fd N                       one driver's private server
    python -m minifier.processes.forkserver --name NAME --idle S --owner PID

A private server serves the connected socket N and exits when it closes. A named one listens on the
abstract Unix socket NAME (nothing on disk), serves any process of the same user, and exits after S
idle seconds or once process PID is gone and its drivers have closed (OWNER_GRACE at most). Either way,
a connection that closes takes the workers it spawned with it, so a driver killed outright leaves no
workers behind.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import select
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable

from ..contract.procs import SERVER_NAME, alive, env_set, kill_worker, name_process, peer_uid
from ..contract.wire import WireError
from ..exchange import fork_protocol as fp
from ..exchange.worklog import phase, server_header
from . import cpu_isa
from .worker import COMPILE_MODULES, import_if_installed, serve

# What every worker imports before its first compile, torch first; the probe that compile would make
# starts right after torch, in a child, so that it runs beside the imports, not after them.
_CPU_ISA = "the CPU vector ISA probe"
_PRELOAD = ("torch", _CPU_ISA, "minifier.program.graph", "torch.export", "torch._inductor.config", *COMPILE_MODULES)
# torch.cuda.is_available() asks the CUDA driver, and from then on torch refuses CUDA in forked children
# ("Cannot re-initialize CUDA in forked subprocess"). Inductor asks it at import time (torch 2.11:
# runtime/benchmarking.py); with this variable set torch asks NVML instead, which leaves fork usable.
_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
# Drivers of a shared server have its owner as theirs and cancel when it goes (aoti-minify --owner polls
# twice a second), which may take a worker or two: ending first would turn their cancel, which leaves
# repro.py from the best checkpoint, into a "fork server gone" error. A driver that never closes is not
# waited for longer than this.
OWNER_GRACE = 10.0


class Server:
    def __init__(self, listener: socket.socket | None, idle: float, owner: int) -> None:
        self.listener = listener
        self.idle = idle
        self.owner = owner
        self.fresh_workers = False  # set once forked children could no longer use CUDA
        self.prepared = False  # imports made, probe adopted: a worker forked now inherits them all
        self.adopted = False  # the probe's answer, in this process
        self.preload: list[str] = []
        self.isa_answer = cpu_isa.SharedAnswer.create()  # for the workers forked before that
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}
        self.connections: set[socket.socket] = set()
        self.last_active = time.monotonic()
        self.owner_gone_at: float | None = None
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears of exits
        self.selector.register(self.wake_read, selectors.EVENT_READ, "reap")
        if listener is not None:
            self.selector.register(listener, selectors.EVENT_READ, "accept")

    def add(self, connection: socket.socket) -> None:
        self.connections.add(connection)
        self.selector.register(connection, selectors.EVENT_READ, connection)
        self._send(connection, fp.Hello(pid=os.getpid(), prepared=self.prepared))

    def serve(self, preload: list[str]) -> None:
        """Answer requests; when there are none, take the next step of `preload` (workers forked before
        it is done take it themselves, in parallel)."""
        self.preload = list(preload)
        while not self._finished():
            events = self.selector.select(timeout=0 if self.preload else 1.0)
            for key, _ in events:
                if key.data == "reap":
                    self._reap()
                elif key.data == "accept":
                    self._accept()
                elif key.data == "probed":
                    self._probed(key.fd)
                else:
                    self._receive(key.data)
            if self.preload and not events:
                self.load(self.preload.pop(0))
                self._say_prepared()

    def load(self, step: str) -> None:
        if self.fresh_workers:
            self.isa_answer.publish(None)
            return
        if step == _CPU_ISA:
            self._probe()
            return
        _import(step)
        self._settle(f"importing {step}")

    def _settle(self, what: str) -> None:
        # Out of the collector's sight: a worker's collections would otherwise walk, and so copy page by
        # page, everything imported here.
        gc.freeze()
        if _fork_poisoned():
            self.fresh_workers = True
            self.isa_answer.publish(None)
            print(
                f"{what} made torch refuse CUDA in forked children: from now on each worker starts a fresh "
                "interpreter (a cold start, as without a fork server)",
                flush=True,
            )

    def _probe(self) -> None:
        """Inductor's CPU vector ISA probe, in a child: it can take tens of seconds, while this process goes
        on forking workers (a compile of theirs waits for the answer meanwhile), and whatever it touches
        (CUDA) stays in the child. Its answer comes back on a pipe, as JSON."""
        answer, write_end = os.pipe()
        sys.stdout.flush()
        if os.fork() == 0:
            os.close(answer)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for sock in [*self.connections, *filter(None, [self.listener])]:
                sock.close()
            try:
                with _nvml_check():
                    os.write(write_end, json.dumps(cpu_isa.probe()).encode())
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                os._exit(0)
        os.close(write_end)
        self.selector.register(answer, selectors.EVENT_READ, "probed")

    def _probed(self, answer: int) -> None:
        """Adopt the probe's answer, and say Prepared: a worker forked from now on inherits it."""
        self.selector.unregister(answer)
        with os.fdopen(answer, "rb") as f:
            data = f.read()
        try:
            found = json.loads(data)
        except ValueError:
            found = None  # the child failed, and said why in this log: each worker probes for itself
        if not isinstance(found, dict) or self.fresh_workers:
            self.isa_answer.publish(None)
            return
        with _nvml_check():
            adopted = cpu_isa.adopt(found)
        self._settle("adopting the CPU vector ISA probe")
        self.isa_answer.publish(found if adopted is not None else None)
        if adopted is not None and not self.fresh_workers:
            phase("probed", f"CPU vector ISAs: {', '.join(adopted) or 'none'}")
            self.adopted = True
            self._say_prepared()

    def _say_prepared(self) -> None:
        """Once the imports are made and the probe's answer adopted, whichever comes last."""
        if self.prepared or not self.adopted or self.preload or self.fresh_workers:
            return
        self.prepared = True
        for connection in list(self.connections):
            self._send(connection, fp.Prepared())

    def _finished(self) -> bool:
        if self.listener is None:  # private: lives exactly as long as its one driver
            return not self.connections and not self.children
        if self.orphaned():
            for connection in list(self.connections):
                self._close(connection)
            return True
        if self.connections or self.children:
            self.last_active = time.monotonic()
            return False
        return time.monotonic() - self.last_active > self.idle

    def orphaned(self) -> bool:
        """Whether a shared server's owner is gone and its drivers have closed, or had OWNER_GRACE to."""
        if not self.owner or alive(self.owner):
            return False
        if self.owner_gone_at is None:
            self.owner_gone_at = time.monotonic()
        return not self.connections or time.monotonic() - self.owner_gone_at > OWNER_GRACE

    def _accept(self) -> None:
        assert self.listener is not None, "accept is registered only for a named server"
        connection, _ = self.listener.accept()
        if peer_uid(connection) != os.getuid():  # another user must never get a process of ours
            connection.close()
            return
        self.add(connection)

    def _receive(self, connection: socket.socket) -> None:
        try:
            record, fds, _, _ = socket.recv_fds(connection, fp.MAX_RECORD, fp.FDS_PER_SPAWN)
        except OSError:
            record, fds = b"", []
        if not record:
            self._close(connection)
            return
        message: fp.Message | WireError
        try:
            message = fp.decode(record)
        except WireError as e:
            message = e
        if not isinstance(message, fp.Spawn) or len(fds) != fp.FDS_PER_SPAWN:
            for fd in fds:
                os.close(fd)
            self._send(connection, fp.Refused(message=f"expected a spawn with {fp.FDS_PER_SPAWN} fds: {message}"))
            return
        self._spawn(connection, message, fds)

    def _spawn(self, connection: socket.socket, request: fp.Spawn, fds: list[int]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_worker(request, fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = connection
        self._send(connection, fp.Spawned(pid=pid, prepared=self.prepared))

    def _become_worker(self, request: fp.Spawn, fds: list[int]) -> None:
        code = 1
        try:
            os.setsid()  # its own group: a timeout kills its compiler children with it
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            os.close(self.wake_read)
            for sock in [*self.connections, *filter(None, [self.listener])]:
                sock.close()
            fd_in, fd_out, log = fds
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.chdir(request.cwd)
            os.environ.clear()
            os.environ.update(request.env)
            if self.fresh_workers:
                os.set_inheritable(fd_in, True)
                os.set_inheritable(fd_out, True)
                os.execv(sys.executable, [sys.executable, "-m", "minifier.processes.worker", str(fd_in), str(fd_out)])
            serve(fd_in, fd_out, self.isa_answer)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _reap(self) -> None:
        try:
            while os.read(self.wake_read, 512):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.children.pop(pid, None)
            if connection is not None and connection in self.connections:
                self._send(connection, fp.Exited(pid=pid, returncode=os.waitstatus_to_exitcode(status)))

    def _close(self, connection: socket.socket) -> None:
        for pid, owner in self.children.items():
            if owner is connection:
                kill_worker(pid)
        self.connections.discard(connection)
        self.selector.unregister(connection)
        connection.close()

    def _send(self, connection: socket.socket, message: fp.Message) -> None:
        try:
            connection.send(fp.encode(message))
        except OSError:
            pass  # the driver is gone; reading its connection's end reports that


def _import(module: str) -> None:
    with _nvml_check():
        try:
            if import_if_installed(module):
                phase("imported", module)
        except Exception:  # a worker that needs it will fail on its own, with its own clear message
            traceback.print_exc()


def _nvml_check() -> contextlib.AbstractContextManager[None]:
    return env_set(_NVML_CHECK, "1")


def _fork_poisoned() -> bool:
    """Whether a child forked now would be refused CUDA: another torch version, or a site hook, may ask
    the driver at import time somewhere else. Asked of a throwaway child, where torch keeps that flag."""
    torch = sys.modules.get("torch")
    in_bad_fork = getattr(getattr(torch, "_C", None), "_cuda_isInBadFork", None)
    if in_bad_fork is None:
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def _listen(name: str) -> socket.socket | None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind("\0" + name)
    except OSError:  # another driver started the same server a moment earlier: use that one
        listener.close()
        return None
    listener.listen(64)
    return listener


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minifier.processes.forkserver")
    parser.add_argument("--fd", type=int)
    parser.add_argument("--name")
    parser.add_argument("--idle", type=float, default=600.0)
    parser.add_argument("--owner", type=int, default=0)
    args = parser.parse_args(argv)
    name_process(SERVER_NAME)
    print(server_header(os.getpid()), flush=True)
    listener = _listen(args.name) if args.name else None
    if args.name and listener is None:
        return 0
    server = Server(listener, args.idle, args.owner)
    if args.fd is not None:
        hangup = select.poll()
        hangup.register(args.fd, 0)  # no events asked for: poll reports a hang-up whatever the mask
        _exit_when(server, lambda: bool(hangup.poll(1000)))
    elif args.owner:

        def orphaned() -> bool:
            time.sleep(1)
            return server.orphaned()

        _exit_when(server, orphaned)
    first, *rest = _PRELOAD
    server.load(first)
    if args.fd is not None:
        server.add(socket.socket(fileno=args.fd))
    server.serve(rest)
    return 0


def _exit_when(server: Server, gone: Callable[[], bool]) -> None:
    """The serving loop sees its driver (private) or its owner (shared) go only between imports,
    which take seconds: a thread watches meanwhile and ends this process and its workers at once."""

    def watch() -> None:
        while not gone():
            pass
        for pid in list(server.children):
            kill_worker(pid)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="owner-watch").start()


if __name__ == "__main__":
    sys.exit(main())

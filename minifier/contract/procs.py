"""Processes: what ours are called, how they are signalled, how their end reads, how a Python child
of this package starts.

Stdlib only: the driver, the fork server, the workers and the language server all use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
from collections.abc import Iterator, Mapping

# What `ps`, `top` and the tests see: workers share the fork server's command line.
WORKER_NAME, SERVER_NAME = "aoti-lens-work", "aoti-lens-fork"
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def name_process(name: str) -> None:
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name)
    except OSError:
        pass


@contextlib.contextmanager
def env_set(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` in this process's environment, and as it was again after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def with_this_package(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Python child that must import this very `minifier` (first on its path, so that
    driver, workers and server speak one protocol version) and print unbuffered."""
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_text(returncode: int) -> str:
    """How a child's end reads, from its returncode as subprocess reports it (negative: the signal)."""
    return f"killed by {signal_name(-returncode)}" if returncode < 0 else f"exited with status {returncode}"


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group that may be gone already."""
    _quietly(os.killpg, pgid, sig)


def kill_worker(pid: int) -> None:
    """The worker and its compiler children: it leads its own process group, except in the moment
    between the fork and its setsid(), when only the process itself exists to be killed."""
    signal_group(pid, signal.SIGKILL)
    _quietly(os.kill, pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether process `pid` still runs: a zombie (dead, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc here: signal 0 is all there is to ask


def peer_uid(sock: socket.socket) -> int:
    """The user of the process at the other end of a Unix socket."""
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def _quietly(kill, pid: int, sig: int) -> None:
    try:
        kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

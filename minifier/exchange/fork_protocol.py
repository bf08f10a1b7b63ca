"""Driver <-> fork server messages: one JSON object per SOCK_SEQPACKET record.

A Spawn record carries the new worker's request pipe, reply pipe and log file as SCM_RIGHTS file
descriptors, so the worker talks to the driver exactly as a directly started one would; only these
dataclasses travel on the socket itself. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..contract import wire


@dataclass(frozen=True)
class Hello:
    """Sent once torch is imported: from now on a spawn takes milliseconds. `prepared`: see Prepared."""

    pid: int
    prepared: bool = False
    type: Literal["hello"] = "hello"


@dataclass(frozen=True)
class Prepared:
    """Sent once the server has made every import and probe that a worker's first compile needs: a worker
    forked from then on inherits them all (one forked before pays what it lacks at its first compile)."""

    type: Literal["prepared"] = "prepared"


@dataclass(frozen=True)
class Spawn:
    """Fork a worker with this environment and working directory (fds: request, reply, log)."""

    env: dict[str, str]
    cwd: str
    type: Literal["spawn"] = "spawn"


@dataclass(frozen=True)
class Spawned:
    """`prepared`: forked after the server was (see Prepared)."""

    pid: int
    prepared: bool = False
    type: Literal["spawned"] = "spawned"


@dataclass(frozen=True)
class Refused:
    message: str
    type: Literal["refused"] = "refused"


@dataclass(frozen=True)
class Exited:
    """A worker this connection spawned has been reaped; `returncode` as subprocess reports it
    (negative: killed by that signal). The driver is not the worker's parent and cannot wait for it."""

    pid: int
    returncode: int
    type: Literal["exited"] = "exited"


Message = Hello | Prepared | Spawn | Spawned | Refused | Exited
_TYPES = {
    "hello": Hello,
    "prepared": Prepared,
    "spawn": Spawn,
    "spawned": Spawned,
    "refused": Refused,
    "exited": Exited,
}
MAX_RECORD = 1 << 20
FDS_PER_SPAWN = 3


def encode(message: Message) -> bytes:
    return wire.dumps(message).encode()


def decode(record: bytes) -> Message:
    return wire.decode_tagged(record, _TYPES, "fork server message")

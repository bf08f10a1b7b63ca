"""The driver's pool of worker processes.

Workers are forked by a fork server that has imported torch once (minifier.processes.forkserver), so that a
replacement costs milliseconds rather than a cold `import torch`. Each worker is its own process
group (g++ and Triton compiler children included), so a timeout or a cancel kills the whole group.
A worker that dies (segfault, abort, `os._exit` after a sticky CUDA error) costs one verdict; the
pool starts a replacement at once and carries on. Queries are queued in the foreground (the search's
rounds) or the background (guesses raced beside them, which live on across rounds until cancelled);
`schedule` decides which idle worker takes what. A query that ran out of GPU or host memory beside others is
no verdict: it waits until nothing else runs, and then runs alone. With `share_weights`, one more worker per GPU
holds the program's weights there and never takes a query; every worker on that GPU uses them (ShareRequest).
Torch-free.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, overload

from ..contract.artifacts import output_error
from ..contract.events import ErrorCode
from ..contract.procs import exit_text, signal_name, with_this_package
from ..contract.signature import ErrorAnalysis
from ..contract.wire import WireError
from ..exchange import worker_protocol as p
from ..exchange import worklog
from .forkclient import ForkServer, ForkServerGone


class PoolError(RuntimeError):
    """Workers cannot run at all; `code` says why: bad_input, environment or internal."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class WorkerLost(PoolError):
    """The worker serving a `call` died or did not answer in time (it has been replaced): `reason` says
    which, `log_tail` is the end of its log (empty for a worker that did not answer)."""

    def __init__(self, request: str, reason: str, log_tail: str = "") -> None:
        log = f"; last log lines:\n{log_tail}" if log_tail else ""
        super().__init__("internal", f"worker failed on {request}: {reason}{log}")
        self.reason = reason
        self.log_tail = log_tail


@dataclass(frozen=True)
class PoolConfig:
    init: p.InitRequest
    log_dir: str
    size: int = 1
    devices: list[str] = field(default_factory=list)
    timeout: float = 600.0
    start_timeout: float = 600.0
    python: str = sys.executable
    keep_warm: float = 0.0  # seconds the fork server waits for the next run (0: it ends with this one)
    owner: int | None = None  # the process whose runs share that warm server and which it must not outlive
    # an idle worker forked before the fork server was prepared warms up meanwhile (its imports): off where the
    # cores leave no room beside the first compile, which it would slow while the fork server imports the same
    warm_early: bool = True


@dataclass(frozen=True)
class Result:
    """A query's answer; of a query with `early_kernel`, also its kernels' compile error as soon as the worker
    saw it ("kernel_failed", `kernel_error`: the query still runs, its answer follows)."""

    query: p.Query
    kind: Literal["outcome", "crash", "timeout", "kernel_failed"]
    seconds: float
    outcome: p.Outcome | None = None
    detail: str = ""
    signal: str = ""
    log: str = ""  # what the worker printed during a query that asked for provenance (its launch trace)
    kernel_error: ErrorAnalysis | None = None


@dataclass(frozen=True)
class SlotView:
    """What scheduling needs to know of a worker."""

    state: Literal["starting", "idle", "busy", "dead"]
    running: Literal["foreground", "background"] | None
    since: float
    warm: bool


@dataclass(frozen=True)
class Plan:
    starts: list[tuple[int, Literal["foreground", "background", "warm"]]]
    preempt: int | None = None  # a worker whose background query goes back to the queue


def schedule(slots: list[SlotView], foreground: int, background: int) -> Plan:
    """Idle workers take foreground queries first, but one worker stays with background queries while
    there are any (guesses are cheap and often right; a round's second candidate can wait one small
    compile). A foreground query left with no worker at all takes the youngest guess's worker."""
    guessing = len(slots) > 1 and (background > 0 or any(s.running == "background" for s in slots))
    in_front = sum(1 for s in slots if s.running == "foreground")
    starts: list[tuple[int, Literal["foreground", "background", "warm"]]] = []
    for index, slot in enumerate(slots):
        if slot.state != "idle":
            continue
        if foreground and in_front < len(slots) - guessing:
            starts.append((index, "foreground"))
            foreground, in_front = foreground - 1, in_front + 1
        elif background:
            starts.append((index, "background"))
            background -= 1
        elif not slot.warm:
            starts.append((index, "warm"))
    busy = {index for index, _ in starts}
    waiting = foreground and in_front == 0
    if waiting and not any(s.state in ("idle", "starting") and i not in busy for i, s in enumerate(slots)):
        guesses = [i for i, s in enumerate(slots) if s.running == "background"]
        if guesses:
            return Plan(starts, preempt=max(guesses, key=lambda i: slots[i].since))
    return Plan(starts)


class _Slot:
    def __init__(
        self,
        index: int,
        config: PoolConfig,
        generation: int,
        forks: ForkServer,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.index = index
        self.extra_env = dict(extra_env or {})  # what one query needs beyond the workers' own (see Pool.submit)
        self.log_path = worklog.worker_log(config.log_dir, index)
        req_read, self.req_write = os.pipe()
        self.rep_read, rep_write = os.pipe()
        try:
            with open(self.log_path, "a+b") as log:  # readable too: a worker keeps its own log short
                log.write(worklog.worker_header(index, generation, forks.pid).encode())
                log.flush()
                self.proc = forks.spawn(
                    {**_worker_env(config, index), **self.extra_env},
                    config.init.work_dir,
                    (req_read, rep_write, log.fileno()),
                    config.start_timeout,
                )
        except (ForkServerGone, OSError) as e:
            for fd in (self.req_write, self.rep_read):
                os.close(fd)
            if isinstance(e, OSError):  # a full or read-only disk under the scratch folder
                raise output_error(self.log_path, e) from e
            raise
        finally:
            os.close(req_read)
            os.close(rep_write)
        os.set_blocking(self.rep_read, False)
        self.buffer = b""
        self.ready = False
        self.state: Literal["starting", "idle", "busy", "dead"] = "starting"
        self.current: p.Query | None = None
        self.log_start = 0  # where the current query's part of the log begins
        self.background = False  # the current query is a guess, raced beside the search
        self.warm = False  # has compiled, or been warmed up, since it started
        self.sent_at = time.monotonic()
        self.deadline = self.sent_at + config.start_timeout
        self.send(config.init)

    def send(self, message) -> None:
        try:
            os.write(self.req_write, p.encode(message))
        except OSError:
            pass  # the worker is gone; its EOF on the reply pipe reports it

    # The slot's state changes only here: starting -> idle <-> busy, and dead from any of them.

    def ask(self, message, timeout: float, query: p.Query | None = None, background: bool = False) -> None:
        """Send `message` and count the worker busy until it answers, `timeout` seconds at most; `query`: the query
        it runs meanwhile."""
        self.state, self.sent_at = "busy", time.monotonic()
        self.deadline = self.sent_at + timeout
        self.current, self.background = query, background
        if query is not None:
            self.log_start = worklog.size(self.log_path)
        self.send(message)

    def free(self) -> None:
        """It answered: ready for the next request."""
        self.state, self.current = "idle", None

    def started(self) -> None:
        """It said Ready: idle, unless a query sent to it before waits in its pipe."""
        self.state, self.ready = "idle" if self.current is None else "busy", True

    def closed(self) -> None:
        """Its reply pipe closed: it died, its query (if any) still to be told as a crash (`Pool._reap`)."""
        self.state = "dead"

    def read_replies(self) -> tuple[list[p.Reply], bool]:
        """Replies now complete, and whether the worker closed its end (it died or exited)."""
        try:
            chunk = os.read(self.rep_read, 1 << 20)
        except BlockingIOError:
            return [], False
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        replies = []
        for line in lines:
            try:
                replies.append(p.decode_reply(line))
            except WireError as e:
                replies.append(p.WorkerFailed(code="internal", message=str(e)))
        return replies, not chunk

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.state, self.current = "dead", None
        for fd in (self.req_write, self.rep_read):
            try:
                os.close(fd)
            except OSError:
                pass

    def death(self) -> str:
        reason, tail = self.death_and_log()
        return f"{reason}; last log lines:\n{tail}"

    def death_and_log(self) -> tuple[str, str]:
        """How the worker died, and the end of its log."""
        tail = worklog.tail(self.log_path)
        code = self.proc.wait()
        return f"worker {exit_text(code)}{_crash_hint(tail, code)}", tail

    def query_log(self) -> str:
        query = self.current
        provenance = isinstance(query, p.QueryRequest) and query.provenance
        return worklog.since(self.log_path, self.log_start) if provenance else ""

    def signal_name(self) -> str:
        code = self.proc.wait()
        return signal_name(-code) if code < 0 else f"EXIT{code}"


class Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.selector = selectors.DefaultSelector()
        self.slots: list[_Slot] = []
        self.generations = [0] * config.size
        self.start_failures = 0
        self.started = 0
        self.warnings: list[str] = []
        self.torch_version = ""
        self.foreground: dict[str, p.Query] = {}  # queued, in order
        self.background: dict[str, p.Query] = {}
        self.query_env: dict[str, dict[str, str]] = {}  # key -> the environment its worker must start with
        self.unclaimed: list[Result] = []  # queries' results that came while `call` waited, for the next `wait`
        # queries that ran out of memory beside others (-> in the background), and the one now running alone
        self.short_of_memory: dict[str, tuple[p.Query, bool]] = {}
        self.alone: str | None = None
        self.cleared_for: str | None = None  # the query short of memory that idle workers were forked again for
        self.memory_detail = ""  # what the last query short of memory raised
        # per GPU (a `devices` entry; "" for all visible): the worker holding the weights there, and its handles
        self.holders: dict[str, _Slot] = {}
        self.held: dict[str, str] = {}
        # per GPU, the bytes its queries start within (none: no limit), and what each query asks for (submit's need)
        self.memory_budget: dict[str, int] = {}
        self.needs: dict[str, int] = {}
        self.over_budget = False  # a query waits for GPU memory the queries running hold
        self.forks = fork_server(config)
        for i in range(config.size):
            self._spawn(i)

    def _spawn(self, index: int, extra_env: Mapping[str, str] | None = None) -> _Slot:
        self.generations[index] += 1
        try:
            slot = _Slot(index, self.config, self.generations[index], self.forks, extra_env)
        except ForkServerGone as e:
            self.close()
            raise _fork_server_lost(self.config, f"cannot start worker {index}: {e}") from e
        self.selector.register(slot.rep_read, selectors.EVENT_READ, slot)
        if index < len(self.slots):
            self.slots[index] = slot
        else:
            self.slots.append(slot)
        if self._device(index) in self.held:  # queued behind its InitRequest
            slot.send(p.ShareRequest(path=self.held[self._device(index)]))
        return slot

    def share_weights(self) -> None:
        """Start, for each GPU, a worker that holds the program's weights there for the others (see the module)."""
        for i, device in enumerate(self.config.devices or [""]):
            if device in self.holders:
                continue
            env = {"CUDA_VISIBLE_DEVICES": device} if device else {}
            try:
                holder = _Slot(self.config.size + i, self.config, 1, self.forks, env)
            except ForkServerGone as e:
                self.warnings.append(f"no worker could hold the weights on GPU {device or 0}: {e}")
                continue
            self.selector.register(holder.rep_read, selectors.EVENT_READ, holder)
            holder.send(p.HoldRequest(path=os.path.join(self.config.init.work_dir, f"weights-{device or 'all'}.ipc")))
            self.holders[device] = holder

    def _unless_shared(self, slot: _Slot, reply: p.Shared) -> None:
        """A worker that could not use the held weights: none on its GPU is asked to again (each places its own, as
        without a holder); one whose CUDA context that broke goes (`_reap` replaces it)."""
        if not reply.error:
            return
        if self.held.pop(self._device(slot.index), None) is not None:
            self.warnings.append(f"the held weights cannot be used, each worker places its own: {reply.error[:300]}")
        if reply.poisoned:
            slot.proc.kill()

    def _device(self, index: int) -> str:
        devices = self.config.devices
        return devices[index % len(devices)] if devices else ""

    def _holder_answered(self, holder: _Slot, reply: p.Reply) -> None:
        """A holder placed the weights (its workers take them from now on), or could not (they keep their own)."""
        device = next(d for d, h in self.holders.items() if h is holder)
        holder.free()  # answered: queries on its GPU wait no longer (`_placing`)
        if isinstance(reply, p.Held) and reply.bytes:
            self.held[device] = reply.path
            for slot in self.slots:
                if self._device(slot.index) == device and slot.state != "dead":
                    slot.send(p.ShareRequest(path=reply.path))
        elif isinstance(reply, p.WorkerFailed):
            self.warnings.append(f"the weights are not shared on GPU {device or 0}: {reply.message[:300]}")

    def _replace(self, slot: _Slot, extra_env: Mapping[str, str] | None = None) -> None:
        try:
            self.selector.unregister(slot.rep_read)
        except (KeyError, ValueError):
            pass
        slot.kill()
        self._spawn(slot.index, extra_env)

    @overload
    def call(self, request: p.DescribeRequest, timeout: float | None = None) -> p.Described: ...
    @overload
    def call(self, request: p.ValuesRequest, timeout: float | None = None) -> p.ValuesStored: ...
    @overload
    def call(self, request: p.FakeCheckRequest, timeout: float | None = None) -> p.FakeChecked: ...
    @overload
    def call(self, request: p.StandaloneRequest, timeout: float | None = None) -> p.StandaloneCode: ...
    @overload
    def call(self, request: p.QueryRequest, timeout: float | None = None) -> p.Outcome: ...
    @overload
    def call(self, request: p.ConfigsRequest, timeout: float | None = None) -> p.Configs: ...
    def call(
        self,
        request: p.DescribeRequest
        | p.ValuesRequest
        | p.FakeCheckRequest
        | p.StandaloneRequest
        | p.QueryRequest
        | p.ConfigsRequest,
        timeout: float | None = None,
    ) -> p.Answer:
        """Send one request to the first ready worker and wait for its reply, `timeout`
        seconds at most (default: as long as a worker may take to start). Queries may run meanwhile:
        their results are kept for the next `wait`."""
        slot = self._wait_idle()
        slot.ask(request, timeout or self.config.start_timeout)
        while True:
            self._dispatch()  # queries submitted before the call start as workers free up
            answer = None
            for s, reply in self._poll():  # every reply of the poll is taken: one from another worker comes too
                if s is not slot:
                    self.unclaimed += self._outcome(s, reply)
                else:
                    answer = reply
            if answer is not None:
                slot.free()
                if isinstance(answer, (p.ValuesStored, p.Outcome)) and answer.poisoned:
                    self._replace(slot)
                if not isinstance(answer, p.CALL_ANSWERS[type(request)]):
                    raise PoolError("internal", f"a worker answered {type(request).__name__} with {answer}")
                return answer
            if slot.state == "dead" or time.monotonic() > slot.deadline:
                reason, tail = (
                    slot.death_and_log()
                    if slot.state == "dead"
                    else (f"no answer within {slot.deadline - slot.sent_at:.0f} s", "")
                )
                self._replace(slot)
                raise WorkerLost(type(request).__name__, reason, tail)

    def submit(
        self, query: p.Query, background: bool = False, env: Mapping[str, str] | None = None, need: int = 0
    ) -> None:
        """Queue a query, foreground (the search) or background (a guess; see `schedule`). A query
        already queued or running just takes the new priority. With `env`, the query runs in a worker
        started for it with those variables set (read once, when the process starts, as
        CUDA_LAUNCH_BLOCKING is), which is replaced by an ordinary one after it. `need`: the GPU bytes it
        asks for; it starts only where they fit in its GPU's `memory_budget` beside the queries running there,
        or where nothing runs there."""
        if need:
            self.needs[query.key] = need
        if self.running(query.key) or query.key in self.background or query.key in self.foreground:
            self.prioritize(query.key, background)
            return
        if any(r.query.key == query.key for r in self.unclaimed):
            return  # it has answered while `call` waited: the next `wait` gives its result
        if query.key in self.short_of_memory:
            return
        if env:
            self.query_env[query.key] = dict(env)
        (self.background if background else self.foreground)[query.key] = query
        self._dispatch()

    def prioritize(self, key: str, background: bool) -> None:
        source, target = (self.foreground, self.background) if background else (self.background, self.foreground)
        if key in source:
            target[key] = source.pop(key)
        for slot in self.slots:
            if slot.current is not None and slot.current.key == key:
                slot.background = background

    def cancel(self, key: str) -> None:
        """Forget a queued query, or kill (and replace) the worker running it."""
        self.foreground.pop(key, None)
        self.background.pop(key, None)
        self.short_of_memory.pop(key, None)
        self.needs.pop(key, None)
        self.query_env.pop(key, None)
        for slot in self.slots:
            if slot.current is not None and slot.current.key == key:
                self._replace(slot)

    def spare(self) -> int:
        """Workers that nothing queued or running will take."""
        if self.short_of_memory or self.alone is not None:
            return 0  # nothing new starts before the query that waits for memory has run alone
        free = sum(1 for s in self.slots if s.current is None)
        return max(0, free - len(self.foreground) - len(self.background))

    def in_flight(self) -> bool:
        return bool(self.foreground or self.background or self.unclaimed or self.short_of_memory) or any(
            s.current is not None for s in self.slots
        )

    def running(self, key: str) -> bool:
        return any(s.current is not None and s.current.key == key for s in self.slots)

    def waiting_for_memory(self) -> int:
        """Queries short of memory that have not answered yet (those waiting, and the one running alone)."""
        alone = self.alone is not None and self.running(self.alone)
        return len(self.short_of_memory) + alone + self.over_budget

    def idle(self) -> bool:
        """A worker could take a request at once, nothing queued waits for it."""
        return self.spare() > 0 and any(s.state == "idle" and s.current is None for s in self.slots)

    def wait(self, until: float | None = None) -> list[Result]:
        """Block until some queries have results (none when nothing is queued or running), or until the
        monotonic time `until` (none then either)."""
        if self.unclaimed:
            new, self.unclaimed = self.unclaimed, []
            return new
        while self.in_flight() and (until is None or time.monotonic() < until):
            self._dispatch()
            new = [r for slot, reply in self._poll() for r in self._outcome(slot, reply)]
            for slot in list(self.slots):
                new.extend(self._reap(slot))
            if new:  # dispatched at the next call, once the caller has stopped what no longer matters
                return new
        return []

    def _outcome(self, slot: _Slot, reply: p.Reply) -> list[Result]:
        """A query's result from its worker's reply (none for other replies); the worker is free again,
        unless the reply only tells of its kernels' compile error (the query goes on)."""
        if isinstance(reply, p.KernelFailed) and slot.current is not None and reply.key == slot.current.key:
            seconds = time.monotonic() - slot.sent_at
            return [Result(slot.current, "kernel_failed", seconds, log=slot.query_log(), kernel_error=reply.error)]
        if not isinstance(reply, p.Outcome) or slot.current is None:
            return []
        query, seconds = slot.current, time.monotonic() - slot.sent_at
        if reply.status == "out_of_memory":
            if query.key != self.alone:
                self.short_of_memory[query.key] = (query, slot.background)
                self.memory_detail = reply.error.headline if reply.error else reply.text[:300]
                slot.free()
                return []
            reply = replace(reply, status="raised")  # short of memory even alone: what it raised is its verdict
        self.needs.pop(query.key, None)
        result = Result(query, "outcome", seconds, outcome=reply, log=slot.query_log())
        slot.free()
        if reply.poisoned or slot.extra_env:
            self._replace(slot)
        return [result]

    def evaluate(self, queries: list[p.Query], on_result: Callable[[Result], bool]) -> list[Result]:
        """Run queries concurrently; when `on_result` returns True, cancel the rest and return."""
        for query in queries:
            self.submit(query)
        keys = {q.key for q in queries}
        results: list[Result] = []
        while self.in_flight():
            new = [r for r in self.wait() if r.query.key in keys]  # not what an earlier search left unclaimed
            results.extend(new)
            if any([on_result(r) for r in new]):  # a list: every result is recorded before deciding
                for query in queries:
                    self.cancel(query.key)
                break
        return results

    def _dispatch(self) -> None:
        self._refresh()
        if self._alone():
            return
        views = [
            SlotView(
                s.state,
                None if s.current is None else "background" if s.background else "foreground",
                s.sent_at,
                s.warm or (not self.config.warm_early and s.proc.prepared is not True),
            )
            for s in self.slots
        ]
        plan = schedule(views, len(self.foreground), len(self.background))
        self.over_budget = False
        for index, task in plan.starts:
            slot = self.slots[index]
            if task == "warm":
                self._warm(slot)
                continue
            queue = self.foreground if task == "foreground" else self.background
            if not queue:
                continue
            key = next(iter(queue))
            if self._placing(slot):
                continue
            if not self._fits(slot, key):
                self.over_budget = True
                continue
            self._send_query(slot, queue.pop(key), background=task == "background")
        if plan.preempt is not None:
            slot = self.slots[plan.preempt]
            preempted = slot.current
            assert preempted is not None, "the schedule preempts only a slot that runs a query"
            self.background = {preempted.key: preempted, **self.background}
            if slot.extra_env:
                self.query_env[preempted.key] = slot.extra_env
            self._replace(slot)

    def _placing(self, slot: _Slot) -> bool:
        """Whether the holder of `slot`'s GPU is still placing the weights: a query started there now would place a
        second copy (a holder that died or is overdue is not waited for)."""
        holder = self.holders.get(self._device(slot.index))
        return holder is not None and holder.state == "starting" and time.monotonic() < holder.deadline

    def _fits(self, slot: _Slot, key: str) -> bool:
        """Whether query `key` may start on `slot`'s GPU: its need fits beside the queries running there."""
        device = self._device(slot.index)
        budget = self.memory_budget.get(device)
        if budget is None:
            return True
        running = [s.current.key for s in self.slots if s.current is not None and self._device(s.index) == device]
        return not running or sum(self.needs.get(k, 0) for k in running) + self.needs.get(key, 0) <= budget

    def _alone(self) -> bool:
        """Whether a query short of memory holds the pool: it waits for the queries running to end, then runs with
        nothing beside it (and nothing else starts until it has answered)."""
        if self.alone is not None and self.running(self.alone):
            return True
        self.alone = None
        if not self.short_of_memory:
            return False
        if any(s.current is not None for s in self.slots):
            return True
        key = next(iter(self.short_of_memory))
        if self.cleared_for != key:
            self._fork_used_again()
            self.cleared_for = key
        idle = next((s for s in self.slots if s.state == "idle"), None)
        if idle is None:
            return True
        query, background = self.short_of_memory.pop(key)
        self._send_query(idle, query, background)
        self.alone = key
        return True

    def _fork_used_again(self) -> None:
        """Alone means alone on the machine: what an idle worker that has compiled still holds (a loaded package, its
        allocator's cache, memory a candidate leaked) goes with it, and a fresh fork takes its place."""
        for slot in self.slots:
            if slot.state == "idle" and slot.warm:
                self._replace(slot, slot.extra_env)

    def _refresh(self) -> None:
        """Fork again each idle worker forked before the fork server was prepared, once it is: such a worker's
        first compile would probe what the new one inherits."""
        try:
            self.forks.receive(timeout=0)
        except ForkServerGone:
            return  # the next spawn says so
        if not self.forks.prepared:
            return
        for slot in self.slots:
            if slot.state == "idle" and slot.current is None and slot.proc.prepared is False:
                self._replace(slot, slot.extra_env)

    def _send_query(self, slot: _Slot, query: p.Query, background: bool) -> None:
        env = self.query_env.pop(query.key, {})
        starting = 0.0
        if env != slot.extra_env:  # the query waits in the new worker's pipe until it is ready
            self._replace(slot, env)
            slot, starting = self.slots[slot.index], self.config.start_timeout
        slot.ask(query, starting + self.config.timeout, query, background)
        slot.warm = True
        self.started += 1

    def _warm(self, slot: _Slot) -> None:
        """A worker with nothing to do meanwhile gets its first-compile set-up over with, so that the
        next round's candidates start on warm workers (on a GPU machine that set-up takes seconds)."""
        slot.ask(p.WarmRequest(), self.config.start_timeout)
        slot.warm = True

    def _reap(self, slot: _Slot) -> list[Result]:
        """Turn a dead or overdue worker into a crash or timeout verdict and replace it."""
        now = time.monotonic()
        overdue = slot.state in ("busy", "starting") and now > slot.deadline
        if slot.state != "dead" and not overdue:
            return []
        query = slot.current
        kind: Literal["crash", "timeout"] = "crash" if slot.state == "dead" else "timeout"
        detail = slot.death() if kind == "crash" else f"no verdict within {self.config.timeout:.0f} s"
        signal_name = slot.signal_name() if kind == "crash" else ""
        log = slot.query_log()
        self._replace(slot)
        if not slot.ready:
            self._count_start_failure(detail)
        if query is None:
            return []
        return [Result(query, kind, now - slot.sent_at, detail=detail, signal=signal_name, log=log)]

    def _count_start_failure(self, detail: str) -> None:
        self.start_failures += 1
        if self.start_failures >= 3 * max(1, self.config.size):
            self.close()
            raise PoolError("environment", f"workers keep dying while starting: {detail}")

    def _poll(self) -> list[tuple[_Slot, p.Answer]]:
        deadlines = [s.deadline for s in self.slots if s.state in ("busy", "starting")]
        wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.5
        out = []
        for key, _ in self.selector.select(timeout=min(wait, 1.0)):
            slot: _Slot = key.data
            replies, closed = slot.read_replies()
            for reply in replies:
                if slot in self.holders.values():
                    if not isinstance(reply, p.Ready):
                        self._holder_answered(slot, reply)
                elif isinstance(reply, p.Shared):
                    self._unless_shared(slot, reply)
                elif isinstance(reply, p.Held):
                    pass
                elif isinstance(reply, p.Ready):
                    slot.started()
                    self.torch_version = reply.torch_version
                    self.warnings.extend(w for w in reply.warnings if w not in self.warnings)
                elif isinstance(reply, p.Warmed):
                    slot.free()
                elif isinstance(reply, p.WorkerFailed):
                    self.close()
                    raise PoolError(reply.code, reply.message)
                else:
                    out.append((slot, reply))
            if closed:
                self.selector.unregister(slot.rep_read)
                slot.closed()
        return out

    def _wait_idle(self) -> _Slot:
        while True:
            idle = next((s for s in self.slots if s.state == "idle" and not self._placing(s)), None)
            if idle is not None:
                return idle
            self._refresh()  # while the holder places the weights, the workers forked too early start again
            self.unclaimed += [r for slot, reply in self._poll() for r in self._outcome(slot, reply)]
            for slot in list(self.slots):
                self.unclaimed += self._reap(slot)

    def close(self) -> None:
        for slot in [*self.slots, *self.holders.values()]:
            try:
                self.selector.unregister(slot.rep_read)
            except (KeyError, ValueError):
                pass
            slot.kill()
        self.slots, self.holders = [], {}
        self.forks.close()


def fork_server(config: PoolConfig) -> ForkServer:
    """The fork server for these workers: with `keep_warm`, the shared one (started if need be)."""
    log = worklog.fork_server_log(config.log_dir)
    env = _worker_env(config, None)
    try:
        if config.keep_warm > 0:
            # Owned by whoever started this driver (the language server, a shell) unless told: it may serve
            # that owner's next run, and must not outlive it.
            owner = config.owner if config.owner is not None else os.getppid()
            return ForkServer.shared(config.python, env, log, config.start_timeout, config.keep_warm, owner)
        return ForkServer.private(config.python, env, log, config.start_timeout)
    except ForkServerGone as e:
        raise _fork_server_lost(config, str(e)) from e


def _fork_server_lost(config: PoolConfig, message: str) -> PoolError:
    log = worklog.fork_server_log(config.log_dir)
    return PoolError("environment", f"{message}; last lines of {log}:\n{worklog.tail(log)}")


def _worker_env(config: PoolConfig, index: int | None) -> dict[str, str]:
    """Worker `index`'s environment; for None, the fork server's (no GPU chosen yet)."""
    env = dict(os.environ)
    for key, value in config.init.launcher.portable().env.items():  # the launcher's own environment lines
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env = with_this_package(env)
    env.setdefault("LC_ALL", "C.UTF-8")
    if config.devices and index is not None:
        env["CUDA_VISIBLE_DEVICES"] = config.devices[index % len(config.devices)]
    return env


def _crash_hint(log_tail: str, returncode: int) -> str:
    if returncode == -signal.SIGKILL:  # the pool kills only workers it has given up on, never as a death
        return " (nobody here killed it: the kernel's OOM killer ends processes so, out of memory?)"
    phase = worklog.last_phase(log_tail)
    if phase == "load":
        compiler = os.environ.get("CXX", "g++")
        return (
            f" while loading the compiled AOTI package: packages built by {compiler} that link a libstdc++ "
            "other than this Python's crash like this (try CXX=/usr/bin/g++ CC=/usr/bin/gcc)"
        )
    if phase == "compile":
        return " while compiling"
    return ""

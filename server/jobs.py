"""Minifier jobs: `aoti-minify run|minify --events` child processes, their events, their progress.

Each child runs in its own process group (start_new_session), so cancelling is one SIGTERM to the
group (the minifier then writes repro.py from its best checkpoint, prints `cancelled` and exits
130), then SIGKILL if it has not stopped after a grace period. A child is told the server's pid
(`--owner`) and cancels itself the same way when the server dies, however it dies: no minifier,
worker or fork server outlives the editor. Nothing a child prints or does can take the server
down: bad lines are logged and skipped, a crash becomes the failure's `error` state.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lsprotocol import types

from minifier.contract.events import ErrorEvent, Event, ExitCode, LogEvent, ends, parse_event
from minifier.contract.procs import exit_text, signal_group, with_this_package
from minifier.contract.wire import WireError

from .failures import FailureRecord, uri_of
from .feature import Feature
from .protocol import RUNNING_STATES, State

if TYPE_CHECKING:
    from .protocol import Settings
    from .server import AotiLanguageServer

JobKind = Literal["run", "minify", "report", "triage", "versions"]

GRACE_SECONDS = 10.0
BACKGROUND_SLOTS = 2  # auto-reproduce compiles a whole model; more at once only slows the editor's machine
EVENT_LINE_LIMIT = 64 << 20  # a failure event carries the graph, kernel source and error text
LOGGED_BAD_LINES = 5
PROGRESS_CREATE_TIMEOUT = 5.0


@dataclass(frozen=True)
class KindText:
    """What the editor says of a job of one kind."""

    title: str  # its progress: "<title> <failure>"
    verb: str  # its failure: "could not <verb> <failure>"
    cancel: str  # the action that stops it
    ends_in: State | None  # the state its result event leaves the record in; None: it leaves none (a report)


KINDS: dict[JobKind, KindText] = {
    "run": KindText("Reproducing", "reproduce", "Cancel reproduction", "reproduced"),
    "minify": KindText("Minifying", "minify", "Cancel minification", "minimized"),
    "report": KindText("Preparing a bug report of", "prepare a bug report of", "Cancel the bug report", None),
    "triage": KindText("Finding a workaround for", "triage", "Cancel the workaround search", "minimized"),
    "versions": KindText(
        "Checking other torch releases for", "check other torch releases for", "Cancel the release check", None
    ),
}

_EXIT_REASONS: dict[int, str] = {
    ExitCode.OK: "aoti-minify finished without reporting a result",
    ExitCode.DID_NOT_FAIL: "the program does not fail here",
    ExitCode.USAGE: "aoti-minify rejected its arguments (are the server and the minifier the same aoti-lens version?)",
    ExitCode.BAD_INPUT: "bad input",
    ExitCode.ENVIRONMENT: "environment problem",
    ExitCode.INTERNAL: "internal error in aoti-minify",
    ExitCode.BUSY: "another aoti-minify works on this dump",
}


def _result(job: Job, record: FailureRecord) -> tuple[State, str | None] | None:
    """The record's state and message as the job's result event left them; None where none came (a triage's `done`
    of the minify it started first is not its result). Read from the job, not the record: an aoti-minify that a
    terminal started once the job's lock was free may have moved the record on (`live.py`) before the job's exit
    is read."""
    if job.ended is None or job.ended[0] != KINDS[job.kind].ends_in or (job.kind == "triage" and not record.triage):
        return None
    return job.ended


@dataclass
class Job:
    failure_id: str
    kind: JobKind
    user: bool
    started: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None
    queued: bool = False
    token: str | None = None
    percentage: int = 0
    cancel_requested: bool = False
    error: str | None = None
    bad_lines: int = 0
    shown: asyncio.Task[None] | None = None  # held: opening the report in the editor
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    ended: tuple[State, str | None] | None = None  # the record's state and message as the job's last event left them


@dataclass(frozen=True)
class Working:
    """Who works on a failure now: a job of the editor's, or (`job` None) an aoti-minify started outside it."""

    command: str  # the job's kind, or the outside process's aoti-minify command
    job: Job | None = None
    pid: int | None = None

    def describe(self) -> str:
        if self.job is not None:
            return self.command
        return f"aoti-minify {self.command} (pid {self.pid}), started outside the editor"


class Jobs(Feature):
    """At most one job per failure; background reproductions share a few slots."""

    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._jobs: dict[str, Job] = {}
        self._slots = asyncio.Semaphore(BACKGROUND_SLOTS)
        self._warming: asyncio.Task[None] | None = None  # held, or the event loop may drop the task
        self._warmed_at = -float("inf")
        self.pids: set[int] = set()  # of every aoti-minify child started: their events logs are this server's own

    async def settings_changed(self, old: Settings) -> None:
        if old.trusted and not self.ls.settings.trusted:
            await self.stop_all("the workspace is no longer trusted")

    async def shutdown(self) -> None:
        await self.stop_all("the server is shutting down")

    def exit(self) -> None:
        self.kill_all()

    def running(self, failure_id: str) -> Job | None:
        return self._jobs.get(failure_id)

    def working_on(self, record: FailureRecord) -> Working | None:
        """Who works on `record` now, one outside the editor first: while it runs, its events are the truth."""
        if record.external is not None:
            return Working(record.external.command, pid=record.external.pid)
        job = self._jobs.get(record.id)
        return Working(job.kind, job) if job is not None else None

    def start(self, record: FailureRecord, kind: JobKind, user: bool) -> Job:
        job = self._jobs[record.id] = Job(failure_id=record.id, kind=kind, user=user)
        if KINDS[kind].ends_in is not None:  # a report or a release check changes nothing of the failure's state
            # a triage of a failure minified already shows its minimal graph while it works; else it minifies first
            keep = kind == "triage" and record.repro is not None
            record.begin("reproducing" if kind == "run" else "minifying", "starting" if user else "queued", keep)
        job.task = asyncio.create_task(self._run(job, record))
        self.ls.changed()
        return job

    def warm(self, launcher: str) -> None:
        """Have a fork server with torch imported wait for this failure's next job: without it the first
        Minify of a failure reproduced in an earlier session, or with autoReproduce off, starts cold."""
        keep_warm = self.ls.settings_for(launcher).keep_warm
        # Rescans come with every checkpoint a job writes; a running job, or a recent warm-up, is enough.
        if not keep_warm or self._jobs or time.monotonic() - self._warmed_at < keep_warm / 2:
            return
        self._warmed_at = time.monotonic()
        self._warming = asyncio.create_task(self._warm(launcher))

    async def _warm(self, launcher: str) -> None:
        argv = self._minifier("warm", launcher)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=os.path.dirname(launcher),
                env=with_this_package(os.environ),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, stderr = await process.communicate()
        except OSError as e:
            self.ls.log(
                f"cannot start {argv[0]} to warm up the minifier's workers: {e.strerror or e}",
                types.MessageType.Warning,
            )
            return
        if process.returncode != 0:
            self.ls.log(
                f"the minifier's workers could not be warmed up: {stderr.decode(errors='replace').strip()[-500:]}",
                types.MessageType.Warning,
            )
        else:
            self.ls.log(f"the minifier's workers are warm for {self.ls.settings_for(launcher).keep_warm:g} s")

    def cancel(self, failure_id: str, reason: str) -> bool:
        job = self._jobs.get(failure_id)
        if job is None:
            return False
        self._cancel(job, reason)
        return True

    async def stop(self, failure_id: str, reason: str) -> None:
        """Cancel and wait until the job has ended."""
        job = self._jobs.get(failure_id)
        if job is not None and job.task is not None:
            self._cancel(job, reason)
            await asyncio.wait({job.task})

    async def stop_all(self, reason: str) -> None:
        tasks = {job.task for job in self._jobs.values() if job.task is not None}
        for job in list(self._jobs.values()):
            self._cancel(job, reason)
        if tasks:
            await asyncio.wait(tasks, timeout=GRACE_SECONDS)
        self.kill_all()

    def kill_all(self) -> None:
        for job in self._jobs.values():
            if job.process is not None and job.process.returncode is None:
                signal_group(job.process.pid, signal.SIGKILL)

    def _cancel(self, job: Job, reason: str) -> None:
        if job.cancel_requested:
            return
        job.cancel_requested = True
        self.ls.log(f"{job.failure_id}: cancelling {job.kind} ({reason})")
        if job.queued and job.task is not None:
            job.task.cancel()
        elif job.process is not None:
            self._terminate(job)
        # else: the child is being spawned; _execute terminates it as soon as it exists

    def _terminate(self, job: Job) -> None:
        assert job.process is not None
        signal_group(job.process.pid, signal.SIGTERM)
        asyncio.get_running_loop().call_later(GRACE_SECONDS, self._kill_if_alive, job)

    def _kill_if_alive(self, job: Job) -> None:
        if job.process is not None and job.process.returncode is None:
            self.ls.log(
                f"{job.failure_id}: aoti-minify ignored SIGTERM for {GRACE_SECONDS:.0f} s; killing it",
                types.MessageType.Warning,
            )
            signal_group(job.process.pid, signal.SIGKILL)

    def command(self, kind: JobKind, launcher: str) -> list[str]:
        settings = self.ls.settings_for(launcher)
        if kind in ("report", "versions"):
            return [settings.python, "-m", "minifier", kind, launcher, "--events"]
        argv = self._minifier(kind, launcher) + ["--events"]
        if kind in ("minify", "triage") and settings.workers:
            argv += ["--workers", str(settings.workers)]
        if settings.timeout:
            argv += ["--timeout", f"{settings.timeout:g}"]
        for module in settings.imports:
            argv += ["--import", module]
        return argv

    def _minifier(self, command: str, launcher: str) -> list[str]:
        """What every aoti-minify child gets alike (a warm-up too, so that its fork server is the one the
        jobs look for): the interpreter, the GPUs, how long workers stay warm."""
        settings = self.ls.settings_for(launcher)
        argv = [settings.python, "-m", "minifier", command, launcher]
        if command != "warm":  # a killed server must leave no minifier running (a warm fork server ends too)
            argv += ["--owner", str(os.getpid())]
        if settings.devices:
            argv += ["--devices", settings.devices]
        if settings.keep_warm:
            argv += ["--keep-warm", f"{settings.keep_warm:g}"]
        return argv

    async def _run(self, job: Job, record: FailureRecord) -> None:
        try:
            if job.user:
                await self._execute(job, record)
            else:
                job.queued = True
                async with self._slots:
                    job.queued = False
                    await self._execute(job, record)
        except asyncio.CancelledError:
            record.state, record.message = "cancelled", f"{job.kind} cancelled before it started"
        except Exception as e:  # a bug here must not leave the failure stuck in a running state
            self.ls.log_exception(f"{job.failure_id}: {job.kind} job failed inside aoti-lsp", e)
            record.state, record.message = "error", f"internal error in aoti-lsp: {e}"
        finally:
            if self._jobs.get(job.failure_id) is job:
                del self._jobs[job.failure_id]
            if job.token is not None:
                self.ls.work_done_progress.end(job.token, types.WorkDoneProgressEnd(message=record.message))
            self.ls.changed()

    async def _execute(self, job: Job, record: FailureRecord) -> None:
        await self._begin_progress(job, record)
        argv = self.command(job.kind, record.launcher)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=record.layout.minifier_dir,
                env=with_this_package(os.environ),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=EVENT_LINE_LIMIT,
            )
        except OSError as e:
            self._fail(job, record, f"cannot start {argv[0]} in {record.layout.minifier_dir}: {e.strerror or e}")
            return
        job.process = process
        self.pids.add(process.pid)
        self.ls.log(f"{job.failure_id}: started {' '.join(argv)} (pid {process.pid})")
        if job.cancel_requested:
            self._terminate(job)
        assert process.stdout is not None and process.stderr is not None
        stderr = asyncio.create_task(self._drain_stderr(job, process.stderr))
        await self._read_events(job, record, process.stdout)
        code = await process.wait()
        await stderr
        self._finish(job, record, code)

    async def _read_events(self, job: Job, record: FailureRecord, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # longer than EVENT_LINE_LIMIT; the reader has skipped it
                self._bad_line(job, f"a line longer than {EVENT_LINE_LIMIT >> 20} MiB")
                continue
            if not line:
                return
            text = line.decode("utf-8", "replace").strip()
            if not text:
                continue
            try:
                event = parse_event(text)
            except WireError as e:
                self._bad_line(job, str(e))
                continue
            self._on_event(job, record, event)

    def _on_event(self, job: Job, record: FailureRecord, event: Event) -> None:
        if isinstance(event, LogEvent):
            level = types.MessageType.Warning if event.level == "warning" else types.MessageType.Info
            self.ls.log(f"{job.failure_id}: {event.message}", level)
            return
        if isinstance(event, ErrorEvent):
            job.error = event.message
        if job.kind == "minify":  # the minifier only reports its clock at checkpoints
            record.seconds = max(record.seconds or 0.0, round(time.monotonic() - job.started, 1))
        record.apply(event)
        if ends(event, job.kind):
            job.ended = (record.state, record.message)
        self._report_progress(job, record)
        self.ls.changed()

    def _bad_line(self, job: Job, why: str) -> None:
        job.bad_lines += 1
        if job.bad_lines <= LOGGED_BAD_LINES:
            more = "; further ones are not logged" if job.bad_lines == LOGGED_BAD_LINES else ""
            self.ls.log(f"{job.failure_id}: ignored output of aoti-minify: {why}{more}", types.MessageType.Warning)

    async def _drain_stderr(self, job: Job, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:
                continue
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                job.stderr_tail.append(text)
                self.ls.log(f"{job.failure_id}: {text}", types.MessageType.Log)

    def _finish(self, job: Job, record: FailureRecord, code: int) -> None:
        if KINDS[job.kind].ends_in is None:
            self._finish_aside(job, record, code)
            return
        state: State
        message: str | None
        if job.cancel_requested or code == ExitCode.CANCELLED:
            if record.state != "cancelled" and not (job.kind == "minify" and record.state == "minimized"):
                record.state = "cancelled"
                record.message = (
                    f"cancelled at {record.progress_line()}"
                    if job.kind == "minify"
                    else "workaround search cancelled"
                    if job.kind == "triage"
                    else "reproduction cancelled"
                )
            state, message = record.state, record.message
        elif code == ExitCode.OK and (result := _result(job, record)) is not None:
            state, message = result
        else:
            self._fail(job, record, self._explain(job, code))
            return
        self.ls.log(f"{job.failure_id}: {job.kind} ended: {message}")
        if job.user and job.token is None and state in ("minimized", "cancelled"):
            # No progress bar in this client: say how it ended, and where the repro is.
            where = f"; repro.py: {record.repro}" if record.repro else ""
            self.ls.tell(f"aoti-lens: {record.id}: {message}{where}", types.MessageType.Info)

    def _finish_aside(self, job: Job, record: FailureRecord, code: int) -> None:
        """A job beside the failure's state: the report is opened, the releases' answer said."""
        if code == ExitCode.OK and job.kind == "report" and record.report:
            self.ls.log(f"{job.failure_id}: wrote {record.report}")
            job.shown = asyncio.create_task(self.ls.show(uri_of(record.report), "the bug report"))
        elif code == ExitCode.OK and job.kind == "versions" and record.releases:
            self.ls.log(f"{job.failure_id}: torch releases: {record.releases}")
            self.ls.tell(f"aoti-lens: {record.id}, torch releases: {record.releases}", types.MessageType.Info)
        elif not job.cancel_requested:
            message = self._explain(job, code)
            self.ls.log(f"{job.failure_id}: {job.kind} failed: {message}", types.MessageType.Error)
            verb = KINDS[job.kind].verb
            self.ls.tell(f"aoti-lens could not {verb} {job.failure_id}: {message}", types.MessageType.Error)

    def _explain(self, job: Job, code: int) -> str:
        if job.error:
            return job.error
        if code < 0:
            reason = f"aoti-minify was {exit_text(code)}"
        else:
            reason = _EXIT_REASONS.get(code, f"aoti-minify {exit_text(code)}")
        return f"{reason}: {job.stderr_tail[-1]}" if job.stderr_tail else reason

    def _fail(self, job: Job, record: FailureRecord, message: str) -> None:
        if KINDS[job.kind].ends_in is not None:
            record.state, record.message = "error", message
        self.ls.log(f"{job.failure_id}: {job.kind} failed: {message}", types.MessageType.Error)
        if job.user:
            verb = KINDS[job.kind].verb
            self.ls.tell(f"aoti-lens could not {verb} {job.failure_id}: {message}", types.MessageType.Error)

    async def _begin_progress(self, job: Job, record: FailureRecord) -> None:
        if not self.ls.supports_progress:
            return
        token = str(uuid.uuid4())
        progress = self.ls.work_done_progress
        try:
            await asyncio.wait_for(progress.create_async(token), PROGRESS_CREATE_TIMEOUT)
        except Exception as e:  # the client refused or never answered: run without a progress bar
            self.ls.log(f"{job.failure_id}: no progress bar ({type(e).__name__}: {e})", types.MessageType.Warning)
            return
        job.token = token
        progress.begin(
            token,
            types.WorkDoneProgressBegin(
                title=f"{KINDS[job.kind].title} {record.id}",
                cancellable=True,
                message=record.message,
                percentage=0 if job.kind == "minify" else None,
            ),
        )

        def on_client_cancel(future: object) -> None:
            if self._jobs.get(job.failure_id) is job:
                self._cancel(job, "cancelled from the progress bar")

        progress.tokens[token].add_done_callback(on_client_cancel)

    def _report_progress(self, job: Job, record: FailureRecord) -> None:
        if job.token is None or record.state not in RUNNING_STATES:  # the end says the rest
            return
        percentage = None
        if job.kind == "minify":
            start, now = record.nodes_start, record.nodes_now
            if start and now and start > 1:
                job.percentage = max(job.percentage, min(100, round(100 * (start - now) / (start - 1))))
            percentage = job.percentage
        self.ls.work_done_progress.report(
            job.token, types.WorkDoneProgressReport(message=record.message, percentage=percentage)
        )

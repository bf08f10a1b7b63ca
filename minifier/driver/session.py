"""One `run` or `minify` over one dump: its options, the launcher read, where outputs go, its workers.

Torch-free: the driver process only parses, schedules and writes; workers do all torch work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from ..contract.artifacts import output_error, prepare, recover
from ..contract.events import Command, Failure, load_failure
from ..contract.launcher import LauncherSpec, read_launcher
from ..contract.layout import DumpLayout
from ..contract.lock import DumpLock, LockInfo
from ..exchange import worker_protocol as p
from ..processes.pool import Pool, PoolConfig, fork_server
from . import devices
from .options import Options
from .reporter import Reporter


@dataclass
class Session:
    options: Options
    spec: LauncherSpec
    layout: DumpLayout
    accuracy: str
    waited_for: list[LockInfo] = field(default_factory=list)  # the runs this one queued behind for the dump

    @classmethod
    def open(cls, options: Options) -> Session:
        spec = read_launcher(options.launcher)
        layout = spec.layout(options.output_dir, options.save_dir)
        if spec.traced:  # its graph is saved where this run writes
            spec = replace(spec, pt2=os.path.join(layout.work, os.path.basename(spec.pt2)))
        prepare(layout, [spec.path, spec.pt2])
        accuracy = spec.accuracy if options.accuracy is None else options.accuracy
        return cls(options=options, spec=spec, layout=layout, accuracy=accuracy)

    @contextlib.contextmanager
    def exclusive(self, command: Command, reporter: Reporter) -> Iterator[None]:
        """Hold the dump's lock for a whole `run` or `minify` (minifier.contract.lock); DumpBusy if another run
        holds it. Only then do the run's events go to the dump's events log too (a run refused must not
        look, to an editor tailing it, like one that failed), and what a killed earlier run left
        half-written is removed, and said.

        A reproduction holding the dump (`run`: the editor starts one the moment a dump appears) is waited for,
        its failure.json then used; with --wait, any run is."""

        def queue_behind(holder: LockInfo) -> bool:
            return self.options.wait or holder.command == "run"

        def on_queue(holder: LockInfo) -> None:
            if holder.command == "run" and not self.options.wait:
                reporter.say(f"{holder.describe()} is reproducing this dump: waiting for it, then using its result")
            else:
                reporter.say(f"waiting for {holder.describe()} to finish (--wait)")

        lock = DumpLock(self.layout.lock)
        try:
            killed = lock.acquire(command, queue_behind, on_queue)
        except OSError as e:
            raise output_error(self.layout.lock, e) from e
        finally:
            self.waited_for = lock.waited_for
        try:
            reporter.record_to(self.layout.events_log, command, self.spec.path)
            removed = recover(self.layout)
            if killed is not None:
                reporter.log(
                    f"the previous run on this dump, {killed.describe()}, was killed before it ended; "
                    "its checkpoints are checked, and this run starts afresh",
                    "warning",
                )
            if removed:
                reporter.log(f"removed what an interrupted run left half-written: {', '.join(removed)}", "warning")
            yield
        finally:
            lock.release()

    @property
    def check_str(self) -> str | None:
        return self.options.check_str if self.options.check_str is not None else self.spec.check_str

    def pool(self, size: int) -> Pool:
        return Pool(self._pool_config(size))

    def warm_up(self) -> None:
        """Start (or find) the fork server that the next run with --keep-warm will use, and leave it."""
        fork_server(self._pool_config(0)).close()

    def _pool_config(self, size: int) -> PoolConfig:
        init = p.InitRequest(
            launcher=self.spec,
            work_dir=self.layout.work,
            export_mode=self.options.export_mode,
            accuracy=self.accuracy,
            imports=self.options.imports,
        )
        return PoolConfig(
            init=init,
            log_dir=self.layout.work,
            size=size,
            devices=self.options.devices,
            timeout=self.options.timeout,
            keep_warm=self.options.keep_warm,
            owner=self.options.owner,
            warm_early=devices.room_beside_a_compile() > 0,
        )

    def reproduced_meanwhile(self) -> Failure | None:
        """The failure a reproduction this run queued behind wrote (None if none wrote one since it started)."""
        runs = [holder for holder in self.waited_for if holder.command == "run"]
        try:
            fresh = bool(runs) and os.path.getmtime(self.layout.failure_json) >= min(r.started for r in runs)
        except OSError:
            return None
        return self.saved_failure() if fresh else None

    def saved_failure(self) -> Failure | None:
        """What an earlier `aoti-minify run` wrote, if anything readable."""
        try:
            return load_failure(self.layout.failure_json)
        except (OSError, ValueError):
            return None

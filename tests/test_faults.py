"""Faults a minification must survive with nothing lost, on real CPU compiles: a second run on the
same dump, a driver killed outright, a full or read-only output folder, workers that print megabytes
of garbage, run out of memory or hang in C++ with signals blocked, and bad input. The tmpfs and
memory-cgroup cases need root (they are skipped without it)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import ROOT, aoti_minify, done_of, events_of, repro_signature, workers_in

from minifier.contract.artifacts import relocate_dump
from minifier.contract.events import CheckpointEvent, ErrorEvent
from minifier.contract.layout import DumpLayout
from minifier.contract.lock import holder
from minifier.contract.procs import alive
from minifier.exchange.worklog import LOG_LIMIT, forked_by

pytestmark = pytest.mark.compile

FAULTS = os.path.join(ROOT, "tests", "data")  # aoti_lens_faults: a custom op that misbehaves on request
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.1)
    return value


def one_line_error(proc: subprocess.CompletedProcess, code: int) -> str:
    """The run's reason: exit `code`, one `error` event, one line, and no traceback anywhere."""
    assert proc.returncode == code, proc.stderr[-3000:]
    error = events_of(proc)[-1]
    assert isinstance(error, ErrorEvent) and "\n" not in error.message, error
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return error.message


def fork_servers(folder: str) -> set[int]:
    return set().union(
        *(
            forked_by(open(log, errors="replace").read())
            for log in glob.glob(os.path.join(folder, "**", "worker-*.log"), recursive=True)
        )
    )


def digests(folder: str) -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(folder))
        if os.path.isfile(os.path.join(folder, name))
    }


# --- two runs on one dump, a killed driver ------------------------------------------------------


@pytest.mark.slow
def test_a_reproduction_is_waited_for_and_a_second_minify_refuses_naming_the_first(dumps, tmp_path):
    """The editor reproduces a dump the moment it appears; the user's minify typed in a terminal meanwhile
    waits for that `run` and goes on (a second `run` with --wait takes its failure.json instead of compiling
    again), while a run started during the minify still exits 6 naming it."""
    launcher = dumps.get(str(tmp_path))
    layout = DumpLayout.of(launcher)

    def start(command: str, *extra: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "minifier", command, launcher, "--events", *extra]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    reproduction = start("run")
    until(lambda: (h := holder(layout.lock)) is not None and h.pid == reproduction.pid, "the reproduction to hold it")
    minify = start("minify", "--workers", "2")
    again = start("run", "--wait")  # whichever of the two goes first, it queues behind the other
    until(lambda: (h := holder(layout.lock)) is not None and h.pid == minify.pid, "the minify to follow it", 300)
    for command in ("minify", "run"):
        message = one_line_error(aoti_minify(command, launcher, "--events"), 6)
        assert f"pid {minify.pid} (aoti-minify minify, started " in message and "wait for it" in message
    results = {
        name: (p, *p.communicate(timeout=600))
        for name, p in [("reproduction", reproduction), ("minify", minify), ("again", again)]
    }
    for name, (proc, _, err) in results.items():
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
    _, out, err = results["minify"]
    assert "is reproducing this dump: waiting for it, then using its result" in err
    assert done_of(events_of(out)).nodes == 1
    _, out, err = results["again"]
    assert "the run it waited for wrote" in out + err and "reproducing /" not in err  # nothing compiled
    assert [type(e).__name__ for e in events_of(out)] == ["FailureEvent"]
    failure = json.load(open(layout.failure_json))
    assert repro_signature(layout.repro_py).message == failure["signature"]["message"]
    assert holder(layout.lock) is None


def test_a_killed_driver_leaves_no_process_and_the_next_run_starts_afresh(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), reproduced=True)
    layout = DumpLayout.of(launcher)
    driver = subprocess.Popen(
        [sys.executable, "-m", "minifier", "minify", launcher, "--workers", "2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    for line in driver.stderr:
        if "minifying" in line:  # its workers are up, compiling the first round
            break
    workers = workers_in(layout.minifier_dir)
    [server] = fork_servers(layout.work)
    assert workers and alive(server)
    driver.kill()
    driver.wait()
    until(
        lambda: not workers_in(layout.minifier_dir) and not alive(server),
        "its workers and fork server to end",
        timeout=5,
    )
    assert holder(layout.lock) is None  # the flock went with the process; its text says who was killed
    # what a run killed mid-write could leave, with the writers of an older version too
    cut = os.path.join(layout.checkpoints, "2.py")
    with open(cut, "w") as f:
        f.write("# a checkpoint whose program was being copied\n")
    with open(os.path.join(layout.checkpoints, "2.pt2"), "wb") as f:
        f.write(b"PK\x03\x04 the start of a zip archive, cut short")
    open(layout.repro_py + ".tmp", "w").close()

    proc = aoti_minify("minify", launcher, "--events", "--workers", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"the previous run on this dump, pid {driver.pid} (aoti-minify minify, started " in proc.stderr
    assert "removed what an interrupted run left half-written: " in proc.stderr
    assert not os.path.exists(cut) and not os.path.exists(layout.repro_py + ".tmp")
    done_of(events_of(proc))


# --- the output folder: full, read-only ---------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path, size: str, readonly: bool = False):
    os.makedirs(path, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if readonly else ""), "tmpfs", str(path)], check=True
    )
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@ROOT_ONLY
def test_a_full_disk_stops_the_run_with_one_line_and_keeps_the_checkpoints(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path / "dump"), reproduced=True)
    minify = [sys.executable, "-m", "minifier", "minify", launcher, "--events", "--workers", "2"]
    with tmpfs(tmp_path / "out", "64m") as out:
        first = subprocess.run([*minify, "--output-dir", out], capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert first.returncode == 0, first.stderr[-3000:]
        layout = DumpLayout.of(launcher, output_dir=out)
        before = digests(layout.checkpoints), digests(layout.root)
        second = subprocess.Popen(
            [*minify, "--output-dir", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )
        for line in second.stderr:
            if "minifying" in line:  # the disk fills up while its first round compiles
                break
        with open(os.path.join(out, "filler"), "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (1 << 20))
        stdout, stderr = second.communicate(timeout=600)
        message = one_line_error(subprocess.CompletedProcess(second.args, second.returncode, stdout, stderr), 4)
        assert "no space left on device" in message.lower(), message
        after = digests(layout.checkpoints), {k: v for k, v in digests(layout.root).items() if k != "filler"}
        assert after == before  # the first run's checkpoints, repro.py and repro.pt2, byte for byte
        assert holder(layout.lock) is None and not glob.glob(os.path.join(out, "**", "*.tmp"), recursive=True)


@ROOT_ONLY
def test_a_read_only_output_folder_is_refused_with_one_line(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path / "dump"), reproduced=True)
    with tmpfs(tmp_path / "out", "1m", readonly=True) as out:
        message = one_line_error(aoti_minify("minify", launcher, "--events", "--output-dir", out), 3)
    assert message.startswith(f"{out} is not writable")


def test_an_unwritable_debug_folder_is_refused_with_one_line(dumps):
    """As a user who may read the dump but not write beside it (setpriv to nobody when root)."""
    as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
    base = tempfile.mkdtemp(prefix="aoti-lens-unwritable-")  # outside pytest's folders, which only root may enter
    try:
        launcher = dumps.get(os.path.join(base, "dump"), reproduced=True)
        for folder, _, files in os.walk(base):
            os.chmod(folder, 0o555)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o444)
        proc = subprocess.run(
            [*as_user, sys.executable, "-m", "minifier", "minify", launcher, "--events"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**os.environ, "HOME": base},
        )
        message = one_line_error(proc, 3)
        assert message.endswith(
            "minifier is not writable (read-only debug folder?); pass --output-dir DIR to write "
            "the minifier's outputs elsewhere"
        ), message
    finally:
        for folder, _, _ in os.walk(base):
            os.chmod(folder, 0o755)
        shutil.rmtree(base)


# --- workers that misbehave ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_dump(tmp_path_factory) -> str:
    """PyTorch's dump of a model whose relu fails to compile, beside a custom op that misbehaves."""
    out = str(tmp_path_factory.mktemp("faulty"))
    proc = subprocess.run(
        [sys.executable, os.path.join(FAULTS, "aoti_lens_faults.py"), out],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": FAULTS},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def minify_faulty(launcher: str, fault: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return aoti_minify(
        "minify",
        launcher,
        "--events",
        "--workers",
        "2",
        "--import",
        "aoti_lens_faults",
        *extra,
        env={**os.environ, "PYTHONPATH": FAULTS, "AOTI_LENS_FAULT": fault, **env},
    )


def finished_at_relu(proc: subprocess.CompletedProcess) -> list:
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = events_of(proc)
    assert done_of(events).nodes == 1
    [checkpoint] = [e for e in events if isinstance(e, CheckpointEvent) and e.nodes == 1]
    assert "torch.ops.aten.relu" in checkpoint.graph
    return events


def test_a_worker_printing_megabytes_of_garbage(fault_dump, tmp_path):
    launcher = relocate_dump(fault_dump, str(tmp_path))
    finished_at_relu(minify_faulty(launcher, "spam"))
    logs = glob.glob(os.path.join(DumpLayout.of(launcher).work, "worker-*.log"))
    assert any("bytes cut" in open(log, errors="replace").read() for log in logs)
    assert all(os.path.getsize(log) < LOG_LIMIT + (24 << 20) for log in logs)  # 48 MiB printed, and counting


def memory_cgroup(name: str, limit: int) -> str | None:
    """A memory cgroup holding `limit` bytes (v1 or v2); the path of its cgroup.procs, or None."""
    for base, limit_file in (("/sys/fs/cgroup/memory", "memory.limit_in_bytes"), ("/sys/fs/cgroup", "memory.max")):
        group = os.path.join(base, name)
        try:
            os.makedirs(group, exist_ok=True)
            with open(os.path.join(group, limit_file), "w") as f:
                f.write(str(limit))
            return os.path.join(group, "cgroup.procs")
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(group)
    return None


def test_a_candidate_that_allocates_until_the_oom_killer_ends_it(fault_dump, tmp_path):
    """The op moves its process into a 512 MiB memory cgroup and allocates until the kernel kills it:
    first in the eager run that saves the graph's values, then in every candidate that keeps it."""
    procs = memory_cgroup(f"aoti-lens-test-{os.getpid()}", 512 << 20)
    if procs is None:
        pytest.skip("no writable memory cgroup (needs root)")
    try:
        launcher = relocate_dump(fault_dump, str(tmp_path))
        proc = minify_faulty(launcher, "hog", "--no-slice", AOTI_LENS_FAULT_CGROUP=procs)
        finished_at_relu(proc)
        assert (
            "the eager run that saves the graph's values lost its worker (worker failed on ValuesRequest: "
            "worker killed by SIGKILL (nobody here killed it: the kernel's OOM killer" in proc.stderr
        )
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(procs))


def test_a_candidate_hanging_in_cpp_with_signals_blocked(fault_dump, tmp_path):
    launcher = relocate_dump(fault_dump, str(tmp_path))
    proc = minify_faulty(launcher, "hang", "--no-slice", "--timeout", "45")
    finished_at_relu(proc)
    assert (
        "the eager run that saves the graph's values lost its worker (worker failed on ValuesRequest: "
        "no answer within 45 s)" in proc.stderr
    )
    assert workers_in(os.path.dirname(launcher)) == []


# --- bad input ----------------------------------------------------------------------------------


def test_bad_programs_and_launcher_paths_exit_3_with_one_line(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path / "dump"))
    pt2 = os.path.join(os.path.dirname(launcher), "checkpoints", "exported_program.pt2")
    with open(pt2, "r+b") as f:  # the archive's bytes scrambled in the middle, its length unchanged
        f.seek(os.path.getsize(pt2) // 2)
        f.write(os.urandom(4096))
    assert "cannot load" in one_line_error(aoti_minify("run", launcher, "--events"), 3)
    with open(pt2, "wb") as f:
        f.write(os.urandom(1 << 16))
    assert "cannot load" in one_line_error(aoti_minify("run", launcher, "--events"), 3)
    loop = tmp_path / "loop.py"
    os.symlink(loop, loop)
    assert "symbolic links" in one_line_error(aoti_minify("run", str(loop), "--events"), 3)


def test_a_program_with_a_custom_op_not_imported_names_the_op_and_the_way_to_register_it(dumps, tmp_path):
    """torch.export.load only logs why it failed; a user who forgot --import must not read "corrupt file"."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-dynamic_fake-accuracy")
    line = one_line_error(aoti_minify("run", launcher, "--events"), 3)
    assert "torch.ops.aoti_lens_examples.pool_tokens" in line and "--import" in line and "corrupt" not in line, line

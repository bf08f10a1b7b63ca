"""Worker pool policy that needs no compile: GPU spreading, environment, dead workers, the fork server."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, child_env

from minifier.contract.launcher import LauncherSpec
from minifier.contract.procs import alive, with_this_package
from minifier.exchange import fork_protocol as fp
from minifier.exchange import worker_protocol as p
from minifier.exchange import worklog
from minifier.processes import cpu_isa
from minifier.processes.forkclient import ForkServer
from minifier.processes.forkserver import OWNER_GRACE
from minifier.processes.pool import Plan, Pool, PoolConfig, PoolError, SlotView, _worker_env, schedule


def config(tmp_path, env=None, imports=(), **kwargs) -> PoolConfig:
    env = env or {
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/cache",
        "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
        "TORCHDYNAMO_REPRO_AFTER": None,
    }
    spec = LauncherSpec(
        path=str(tmp_path / "minifier_launcher.py"), pt2=str(tmp_path / "x.pt2"), run_repro_line=0, env=env
    )
    init = p.InitRequest(launcher=spec, work_dir=str(tmp_path), imports=list(imports))
    return PoolConfig(init=init, log_dir=str(tmp_path), **kwargs)


def save_relu_program(folder) -> None:
    """A one-node program (x.relu()) where `config` has the pool find it: real compiles of seconds."""
    import torch

    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    torch.export.save(torch.export.export(Tiny(), (torch.ones(2),)), str(folder / "x.pt2"))


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def gone(pid: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):  # a zombie too: a fork server this test started is its child
            return True
        time.sleep(0.2)
    return False


ORIGINAL = p.OriginalProgram()
IDLE = SlotView("idle", None, 0.0, True)


def running(what, since=0.0):
    return SlotView("busy", what, since, True)


def test_the_search_goes_first_but_one_worker_stays_with_the_guesses():
    assert schedule([IDLE, IDLE], foreground=2, background=0) == Plan([(0, "foreground"), (1, "foreground")])
    assert schedule([IDLE, IDLE], foreground=2, background=3) == Plan([(0, "foreground"), (1, "background")])
    assert schedule([IDLE] * 4, foreground=2, background=3) == Plan(
        [(0, "foreground"), (1, "foreground"), (2, "background"), (3, "background")]
    )
    # a guess still compiling keeps its worker: the next round starts on the others
    assert schedule([running("background"), IDLE, IDLE], foreground=2, background=0) == Plan(
        [(1, "foreground"), (2, "foreground")]
    )
    assert schedule([IDLE], foreground=1, background=1) == Plan([(0, "foreground")])  # one worker: no guesses


def test_a_search_with_no_worker_at_all_takes_the_youngest_guess_worker():
    guesses = [running("background", since=1.0), running("background", since=2.0)]
    assert schedule(guesses, foreground=1, background=0) == Plan([], preempt=1)
    assert schedule([running("foreground"), running("background")], foreground=1, background=0) == Plan([])
    assert schedule(
        [SlotView("starting", None, 0.0, False), running("background")], foreground=1, background=0
    ) == Plan([])  # a worker is on its way


def test_idle_workers_with_nothing_to_do_warm_up():
    cold = SlotView("idle", None, 0.0, False)
    assert schedule([cold, IDLE], foreground=0, background=0) == Plan([(0, "warm")])


def test_workers_are_spread_round_robin_over_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHDYNAMO_REPRO_AFTER", "aot")
    monkeypatch.setenv("AOTINDUCTOR_REPRO_LEVEL", "3")  # a worker must never dump a launcher of its own
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cfg = config(tmp_path, size=4, devices=["0", "1", "2"])
    envs = [_worker_env(cfg, i) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "0"]
    assert all(
        e["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1"
        and "TORCHDYNAMO_REPRO_AFTER" not in e
        and "AOTINDUCTOR_REPRO_LEVEL" not in e
        for e in envs
    )
    # the launcher's cache folder is a path of the machine that wrote it: not followed
    assert not any("TORCHINDUCTOR_CACHE_DIR" in e for e in envs)


def test_no_devices_leaves_visibility_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "CUDA_VISIBLE_DEVICES" not in _worker_env(config(tmp_path, size=1), 0)


def test_an_interpreter_that_cannot_start_workers_gives_a_clear_error(tmp_path):
    # An interpreter that exits at once stands for a broken environment (a venv whose Python is gone).
    with pytest.raises(PoolError) as raised:
        Pool(config(tmp_path, size=1, python="/bin/false", start_timeout=30))
    assert raised.value.code == "environment" and "fork server is gone" in str(raised.value)


def test_workers_dying_while_starting_are_reported_with_their_signal(tmp_path, monkeypatch):
    (tmp_path / "aoti_lens_aborts.py").write_text("import os\nos.abort()\n")  # a custom-op library that crashes
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = Pool(config(tmp_path, size=1, imports=["aoti_lens_aborts"], start_timeout=60))
    try:
        with pytest.raises(PoolError) as raised:
            pool.call(p.DescribeRequest())
    finally:
        pool.close()
    assert raised.value.code == "environment" and "keep dying while starting" in str(raised.value)
    assert "killed by SIGABRT" in str(raised.value)


def test_a_warm_fork_server_serves_the_next_run_with_the_same_environment(tmp_path):
    for run in "abc":
        (tmp_path / run).mkdir()
    first = Pool(config(tmp_path / "a", size=1, keep_warm=60))
    server = first.forks.pid
    assert parent_of(first.slots[0].proc.pid) == server  # workers are forked, not started cold
    first.close()
    second = Pool(config(tmp_path / "b", size=1, keep_warm=60))
    other_env = None
    try:
        assert second.forks.pid == server
        assert parent_of(second.slots[0].proc.pid) == server
        # Inductor reads TORCHINDUCTOR_* at import: another environment needs its own server.
        other_env = Pool(config(tmp_path / "c", env={"TORCHINDUCTOR_CACHE_DIR": "/tmp/other"}, size=1, keep_warm=60))
        assert other_env.forks.pid != server
    finally:
        second.close()
        for pool in filter(None, [other_env]):
            pool.close()
            os.kill(pool.forks.pid, signal.SIGKILL)
        os.kill(server, signal.SIGKILL)


def test_a_killed_driver_takes_its_workers_but_not_the_warm_fork_server(tmp_path):
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import sys, time
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import pathlib
from test_workers import config
from minifier.processes.pool import Pool
pool = Pool(config(pathlib.Path({str(tmp_path)!r}), size=1, keep_warm=60))
print(pool.forks.pid, pool.slots[0].proc.pid, flush=True)
time.sleep(600)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server, worker = map(int, driver.stdout.readline().split())
    try:
        driver.kill()
        driver.wait()
        assert gone(worker)
        assert not gone(server, seconds=1)
    finally:
        os.kill(server, signal.SIGKILL)


def test_runs_of_different_parents_with_one_owner_share_its_warm_fork_server(dumps, tmp_path):
    """pytest-xdist's workers pass their controller as --owner: their runs share one server per environment, and
    it ends with that owner."""
    launcher = dumps.get(str(tmp_path / "dump"))
    owner = subprocess.Popen(["sleep", "600"])
    warm = [sys.executable, "-m", "minifier", "warm", launcher, "--keep-warm", "600", "--owner", str(owner.pid)]
    try:
        for _ in range(2):  # each from a shell of its own: the parents differ
            proc = subprocess.run(
                ["sh", "-c", '"$@"; exit $?', "sh", *warm],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=child_env(),
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
        found = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if owned_by(pid, owner.pid)]
        [server] = [pid for pid in found if parent(pid) not in found]  # not its children (the CPU ISA probe)
    finally:
        owner.kill()
        owner.wait()
    assert gone(server, seconds=OWNER_GRACE + 5)


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def owned_by(pid: int, owner: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"minifier.processes.forkserver" in argv and argv[argv.index(b"--owner") + 1] == str(owner).encode()


def test_a_shared_fork_server_outlives_its_owner_until_its_drivers_close(tmp_path):
    # A killed language server: its minifier cancels (repro.py from the best checkpoint) and may still
    # need a worker meanwhile; the warm fork server they share must not go first, nor stay for ever.
    owner = subprocess.Popen(["sleep", "600"])
    env = with_this_package(os.environ)
    log = str(tmp_path / "forkserver.log")
    cancelling = ForkServer.shared(sys.executable, env, log, 120, 600, owner.pid)
    hung = ForkServer.shared(sys.executable, env, log, 120, 600, owner.pid)
    assert cancelling.pid == hung.pid
    server = cancelling.pid
    owner.kill()
    owner.wait()
    lost_owner = time.monotonic()
    time.sleep(2)
    assert alive(server)
    req_read, req_write = os.pipe()
    rep_read, rep_write = os.pipe()
    with open(tmp_path / "worker.log", "ab") as worker_log:
        worker = cancelling.spawn(env, str(tmp_path), (req_read, rep_write, worker_log.fileno()), 60)
        worker_pid = worker.pid
    for fd in (req_read, rep_write):
        os.close(fd)
    try:
        cancelling.close()  # the cancelled driver is done: its worker goes with its connection
        assert gone(worker_pid)
        assert alive(server)  # a driver is still connected
        assert gone(server, seconds=OWNER_GRACE + 5)  # ... and is not waited for past the grace
        assert time.monotonic() - lost_owner > OWNER_GRACE - 1
    finally:
        hung.close()
        for fd in (req_write, rep_read):
            os.close(fd)
        if alive(server):
            os.kill(server, signal.SIGKILL)


def test_a_query_with_its_own_environment_gets_a_worker_started_with_it(tmp_path, monkeypatch):
    # CUDA_LAUNCH_BLOCKING is read once, when CUDA starts in a worker: the pool starts a worker for the one
    # query that needs it, and an ordinary worker after it, so that no other verdict is taken under it.
    save_relu_program(tmp_path)
    (tmp_path / "aoti_lens_env_mark.py").write_text(
        "import os\nprint('mark:', os.environ.get('AOTI_LENS_MARK'), flush=True)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = Pool(config(tmp_path, size=1, imports=["aoti_lens_env_mark"], start_timeout=120))
    try:
        pool.submit(p.QueryRequest(key="marked", program=ORIGINAL), env={"AOTI_LENS_MARK": "1"})
        [marked] = pool.wait()
        pool.submit(p.QueryRequest(key="plain", program=ORIGINAL))
        [plain] = pool.wait()
    finally:
        pool.close()
    assert (marked.query.key, marked.outcome.status, plain.query.key, plain.outcome.status) == (
        "marked",
        "passed",
        "plain",
        "passed",
    )
    with open(worklog.worker_log(str(tmp_path), 0)) as f:
        marks = [line.split()[-1] for line in f if line.startswith("mark:")]
    assert marks == ["None", "1", "None"]


def test_a_worker_forked_before_the_fork_server_was_prepared_adopts_its_probe_and_is_forked_again_when_idle(tmp_path):
    # The fork server's last step is Inductor's CPU vector ISA probe (50 s of each fresh worker's first
    # passing compile on the H200): a worker forked before it that compiles at once takes the server's
    # answer instead of probing itself, and one idle once the server has it is forked anew.
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        early = pool.slots[0].proc
        at_once = pool.call(p.QueryRequest(key="at-once", program=ORIGINAL), timeout=120)  # no refork in between
        if not pool.forks.prepared:
            assert isinstance(pool.forks.receive(timeout=120, until=fp.Prepared), fp.Prepared)
        pool.submit(p.QueryRequest(key="after", program=ORIGINAL))
        [answered] = pool.wait()
        late = pool.slots[0].proc
    finally:
        pool.close()
    assert early.prepared is False and late.prepared is True
    assert at_once.status == answered.outcome.status == "passed"
    with open(worklog.fork_server_log(str(tmp_path))) as f:
        assert "probed CPU vector ISAs" in f.read()
    with open(worklog.worker_log(str(tmp_path), 0)) as f:
        log = f.read()
    assert [what for _, what in worklog.starts(log)] == ["started (start 1)", "started (start 2)"]
    assert log.count("adopted the fork server's CPU vector ISA probe after") == 1 and "probed the CPU" not in log


def test_where_cores_are_short_a_worker_forked_early_does_not_warm_up_until_forked_again(tmp_path):
    # On 2 cores an idle worker's warm-up (Inductor's imports) ran beside the fork server's import of the same and
    # the first compile, and was thrown away when the worker was forked again: the demo's `done` 0.4 s later.
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=2, start_timeout=120, warm_early=False))
    try:
        pool.submit(p.QueryRequest(key="original", program=ORIGINAL))  # one worker compiles, the other is idle
        [answered] = pool.wait()
        if not pool.forks.prepared:
            assert isinstance(pool.forks.receive(timeout=120, until=fp.Prepared), fp.Prepared)
        pool.submit(p.QueryRequest(key="again", program=ORIGINAL))
        pool.wait()
    finally:
        pool.close()
    assert answered.outcome.status == "passed"
    for index in (0, 1):
        with open(worklog.worker_log(str(tmp_path), index)) as f:
            first = f.read().split("=== worker")[1]  # forked with the pool, before the fork server was prepared
        assert "start 1" in first and "answered Warmed" not in first, first


def made_in_a_child(make) -> tuple:
    """What `make()` returns (a JSON list), made in a forked child: a probe changes its process's ISAs
    (Inductor's bf16 check adds its flag to avx512's for good), so probes are made as the fork server has
    them made."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, json.dumps(make()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        got = tuple(json.load(f))
    os.waitpid(pid, 0)
    return got


def probed_in_a_child() -> tuple[dict, list]:
    """The probe's answers (real builds) and ISAs."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    return made_in_a_child(lambda: [cpu_isa.probe(), [str(isa) for isa in valid_vec_isa_list()]])


def test_the_probe_loads_builds_without_importing_torch_and_confirms_a_failed_load_inductors_way():
    """Torch 2.11's load check imports torch in its child (7 s a check on the H200): the probe loads the
    build without it, and a load that fails so is made again Inductor's way, so the answers stay Inductor's."""
    from torch._inductor.cpu_vec_isa import VecISA

    old_check = 'import torch\nfrom ctypes import cdll\ncdll.LoadLibrary("__lib_path__")\n'  # torch 2.11's
    without_import = old_check.split("\n", 1)[1].rstrip("\n")
    assert cpu_isa.light_load([sys.executable, "-c", old_check]) == [sys.executable, "-c", without_import]
    assert cpu_isa.light_load([sys.executable, "-c", VecISA._avx_py_load]) is None  # light already
    assert cpu_isa.light_load(["g++", "-c", "x.cpp"]) is None

    def probed_with(light_load) -> tuple[dict, list]:
        """The probe's answers and the load checks it ran, with torch 2.11's check (in a child)."""

        def make() -> list:
            VecISA._avx_py_load = old_check
            cpu_isa.light_load = light_load
            ran, real_run = [], subprocess.run
            subprocess.run = lambda cmd, *a, **k: ran.append(cmd[-1]) or real_run(cmd, *a, **k)
            found = cpu_isa.probe()
            return [found, [code for code in ran if "LoadLibrary" in code]]

        return made_in_a_child(make)

    cpu_isa.forget()
    found, _ = probed_in_a_child()
    light, loads = probed_with(cpu_isa.light_load)
    assert light == found and loads and not any("import torch" in code for code in loads)
    failing = [sys.executable, "-c", "raise SystemExit(1)"]
    light_load = cpu_isa.light_load
    confirmed, loads = probed_with(lambda cmd: failing if light_load(cmd) else None)
    assert confirmed == found and len(loads) == len(found) and all("import torch" in code for code in loads)


def test_a_worker_waits_for_the_shared_isa_answer_and_probes_itself_where_none_comes():
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    def ensured_in_a_child(shared: cpu_isa.SharedAnswer, wait: float) -> tuple[int, int]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            how = cpu_isa.ensure({}, shared, wait=wait)
            os.write(write, json.dumps([how, [str(isa) for isa in valid_vec_isa_list()]]).encode())
            os._exit(0)
        os.close(write)
        return pid, read

    def answer(child: tuple[int, int]) -> tuple[str, list]:
        pid, read = child
        with os.fdopen(read) as f:
            got = tuple(json.load(f))
        os.waitpid(pid, 0)
        return got

    cpu_isa.forget()
    try:
        found, probed = probed_in_a_child()
        waiting = cpu_isa.SharedAnswer.create()
        child = ensured_in_a_child(waiting, wait=60)
        time.sleep(0.5)  # the child waits: the answer is published after it asked
        waiting.publish({check: False for check in found})  # answers no build would give: taken, not rebuilt
        waiting.publish(found)  # written once: a later publish changes nothing
        how, isas = answer(child)
        assert how.startswith("adopted the fork server's CPU vector ISA probe after") and isas == []
        refused = cpu_isa.SharedAnswer.create()
        refused.publish(None)  # the server will have none (it starts fresh workers, or its child failed)
        how, isas = answer(ensured_in_a_child(refused, wait=60))
        assert how.startswith("probed the CPU vector ISAs in") and isas == probed
        how, _ = answer(ensured_in_a_child(cpu_isa.SharedAnswer.create(), wait=0.2))  # its child hung
        assert how.startswith("probed the CPU vector ISAs in")
    finally:
        cpu_isa.forget()


def test_the_isa_probe_made_elsewhere_is_adopted_from_its_answers_and_forgotten_for_vec_isa_ok():
    from torch._inductor import config as inductor_config
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    cpu_isa.forget()
    try:
        found, probed = probed_in_a_child()
        assert found and probed and valid_vec_isa_list.cache_info().currsize == 0
        assert cpu_isa.adopt({check: False for check in found}) == []  # the answers, not new builds
        cpu_isa.forget()
        assert cpu_isa.adopt(found) == probed
        cpu_isa.forget_inherited({})
        assert valid_vec_isa_list.cache_info().currsize == 1  # a launcher that leaves vec_isa_ok alone
        cpu_isa.forget_inherited({"cpp.vec_isa_ok": True})
        assert valid_vec_isa_list.cache_info().currsize == 0
        cpu_isa.adopt(found)
        with inductor_config.patch({"cpp.vec_isa_ok": False}):
            cpu_isa.forget_inherited({})
        assert valid_vec_isa_list.cache_info().currsize == 0
        cpu_isa.ensure({"cpp.vec_isa_ok": True})  # that compile needs no probe
        assert valid_vec_isa_list.cache_info().currsize == 0
        cpu_isa.ensure({})  # a worker forked before the fork server had the answer probes before compiling
        assert [str(isa) for isa in valid_vec_isa_list()] == probed
    finally:
        cpu_isa.forget()


def test_a_wait_with_a_deadline_returns_by_then_and_the_query_answers_later(tmp_path):
    # the first round waits for the accuracy probe only so long (accuracy_probe.AccuracyProbe.probe_first)
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        pool.submit(p.QueryRequest(key="slow", program=ORIGINAL))  # an AOTI compile: seconds
        # without the deadline this wait would return the answer
        assert pool.wait(until=time.monotonic() + 0.5) == [] and pool.in_flight()
        [answered] = pool.wait()
    finally:
        pool.close()
    assert answered.query.key == "slow" and answered.outcome.status == "passed"


def test_a_query_that_answers_while_another_worker_is_called_is_kept_for_the_next_wait(tmp_path):
    # minify asks a worker for a standalone check's code while the search's queries compile
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=2, start_timeout=120))
    try:
        pool.call(p.DescribeRequest())  # both workers up
        pool.submit(p.QueryRequest(key="compiling", program=ORIGINAL))  # an AOTI compile: seconds
        deadline = time.monotonic() + 120
        while not pool.unclaimed and time.monotonic() < deadline:
            assert isinstance(pool.call(p.DescribeRequest()), p.Described)
            time.sleep(0.2)
        [answered] = pool.wait()
    finally:
        pool.close()
    assert answered.query.key == "compiling" and answered.outcome.status == "passed"


def test_a_query_in_a_cache_of_its_own_compiles_while_the_same_graph_holds_inductors_lock(tmp_path, monkeypatch):
    # minify's early standalone check compiles the graph that the search's last candidate compiles beside it
    from torch.utils._filelock import FileLock

    save_relu_program(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))  # the workers' (a launcher's path is dropped)
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        pool.submit(p.QueryRequest(key="first", program=ORIGINAL))
        assert pool.wait()[0].outcome.status == "passed"
        locks = [FileLock(str(path)) for path in (cache / "locks").glob("*.lock")]
        assert locks  # the package's own among them, named for its wrapper code
        for lock in locks:  # held as by a worker compiling the same graph
            lock.acquire()
        try:
            pool.submit(p.QueryRequest(key="beside", program=ORIGINAL, own_cache=True))
            answered = pool.wait(until=time.monotonic() + 120)  # in the shared cache: Inductor's 10-minute timeout
        finally:
            for lock in locks:
                lock.release()
    finally:
        pool.close()
    assert [r.outcome.status for r in answered] == ["passed"]
    assert not (tmp_path / "caches" / "beside").exists()


def test_a_worker_killed_the_moment_it_is_forked_is_reaped(tmp_path):
    # A minify can end right after it replaced a worker, before the new one has made itself a process
    # group leader: killing that worker must still kill it, and closing the pool must not wait forever.
    save_relu_program(tmp_path)  # workers stay up
    pool = Pool(config(tmp_path, size=2, start_timeout=60))
    assert isinstance(pool.call(p.DescribeRequest()), p.Described)  # the fork server forks at once from now on
    closing = threading.Thread(target=lambda: ([pool._replace(pool.slots[0]) for _ in range(5)], pool.close()))
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive(), "closing the pool hung on a worker that was never killed"


def test_kernel_provenance_survives_in_the_log_of_a_worker_that_dies(capsys):
    kernels = {"cpp_fused_relu_0:1": ["relu"], "aoti_torch_cpu_mm_out:2": ["linear"]}
    worklog.provenance_mark(kernels)
    log = "W1201 Inductor noise\n" + capsys.readouterr().out + "[ before_launch: cpp_fused_relu_0 ]\nterminate called"
    assert worklog.provenance_in(log) == kernels
    assert worklog.provenance_in("no mark here") == {} and worklog.provenance_in(worklog.PROVENANCE_MARK + "{") == {}


def test_kernel_provenance_is_recorded_when_the_compile_s_caches_are_warm(tmp_path):
    # caches stay on in the provenance compile: a second compile of the same graph still names its kernel
    save_relu_program(tmp_path)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    pool = Pool(config(tmp_path, env=env, size=1, start_timeout=120))
    try:
        for key in ("cold", "warm"):
            pool.submit(p.QueryRequest(key=key, program=ORIGINAL, provenance=True))
            [answered] = pool.wait()
            assert answered.outcome.status == "passed"
    finally:
        pool.close()
    with open(worklog.worker_log(str(tmp_path), 0)) as f:
        log = f.read()
    marks = log.split(worklog.PROVENANCE_MARK)[1:]
    assert len(marks) == 2
    for mark in marks:
        kernels = worklog.provenance_in(worklog.PROVENANCE_MARK + mark)
        assert any(name.startswith("cpp_fused_relu") and nodes == ["relu"] for name, nodes in kernels.items()), kernels


def test_a_compile_marks_how_long_it_took_and_where(tmp_path):
    # the log that comes back from a device run says why a compile was slow (bench/timeline.py shows it)
    save_relu_program(tmp_path)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "AOTI_LENS_COMPILE_STACKS": "0.5"}
    pool = Pool(config(tmp_path, env=env, size=1, start_timeout=120))
    try:
        pool.submit(p.QueryRequest(key="timed", program=ORIGINAL))
        [answered] = pool.wait()
    finally:
        pool.close()
    assert answered.outcome.status == "passed"
    with open(worklog.worker_log(str(tmp_path), 0)) as f:
        log = f.read()
    [(at, times)] = worklog.compiled_marks(log)
    steps = {step: t for t, step, _ in worklog.phase_marks(log)}
    assert steps["compile"] <= at <= steps["load"]
    assert 0 < float(times.split()[1]) <= steps["load"] - steps["compile"] + 0.1
    assert "AotCodeCompiler.compile" in times  # on CPU a tiny graph's compile is mostly the package's g++
    during = log[log.index("[aoti-lens phase] compile") : log.index("[aoti-lens phase] load")]
    assert worklog.STACK_MARK in during and "aoti_compile_and_package" in during  # the stacks it asked for
    assert log.count(worklog.STACK_MARK) == during.count(worklog.STACK_MARK)  # and only then


def test_the_compile_mark_names_the_timers_that_took_the_time(capsys):
    worklog.compiled_mark(
        12.34,
        {
            "compile_fx_inner": 12.3,
            "AotCodeCompiler.compile": 9.0,
            "compile_file": 8.9,
            "Scheduler.codegen": 2.0,
            "GraphLowering.run": 0.1,
        },
    )
    [(_, times)] = worklog.compiled_marks(capsys.readouterr().out)
    assert times == "in 12.3 s: AotCodeCompiler.compile 9.0, compile_file 8.9, Scheduler.codegen 2.0"


@pytest.mark.compile
def test_kernels_that_do_not_compile_are_told_while_the_wrapper_compiles_and_then_raised_as_inductor_does(tmp_path):
    # the wrapper's compile, which Inductor runs first, is most of a CPU compile: the kernels' starts beside it
    save_relu_program(tmp_path)
    cfg = config(tmp_path, size=1, start_timeout=120)
    spec = dataclasses.replace(cfg.init.launcher, config_patches={"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"})
    pool = Pool(dataclasses.replace(cfg, init=dataclasses.replace(cfg.init, launcher=spec)))
    try:
        pool.submit(p.QueryRequest(key="whole", program=ORIGINAL, provenance=True, early_kernel=True))
        results = pool.wait()
        if all(r.kind == "kernel_failed" for r in results):  # told first: the outcome comes later
            results += pool.wait()
    finally:
        pool.close()
    assert [r.kind for r in results] == ["kernel_failed", "outcome"], results
    early, final = results
    error = early.kernel_error
    assert error is not None and error.kernel is not None and error.kernel.name.startswith("cpp_fused_relu")
    assert worklog.provenance_in(early.log), "the provenance of the compile still running"
    assert final.outcome.status == "raised" and final.outcome.error.signature == error.signature
    assert final.outcome.built, "raised by the package's C++ build"


# A repro_standalone.py whose inputs ask, the first time, for memory no machine has (4 TiB): an allocation the
# graph does not show, as a library's scratch buffer or cache would make. Each run with MARKER gone asks nothing.
SPIKE = """
import os, torch

class Repro(torch.nn.Module):
    def forward(self, x):
        return x.relu()

DYNAMIC_SHAPES = None

def make_inputs():
    if os.path.exists({marker!r}):
        {consume}
        torch.empty(1 << 42, dtype=torch.uint8)
    return (torch.ones(2),)
"""


def spike_script(tmp_path, once: bool) -> str:
    marker = tmp_path / "spike"
    marker.touch()
    script = tmp_path / "spike.py"
    script.write_text(SPIKE.format(marker=str(marker), consume=f"os.remove({str(marker)!r})" if once else "pass"))
    return str(script)


def test_a_query_short_of_memory_beside_another_waits_and_runs_alone_without_a_verdict(tmp_path):
    save_relu_program(tmp_path)
    script = spike_script(tmp_path, once=True)
    pool = Pool(config(tmp_path, size=2, start_timeout=120))
    answered, waiting = [], set()
    try:
        pool.call(p.DescribeRequest())  # both workers up
        pool.submit(p.QueryRequest(key="beside", program=ORIGINAL))  # an AOTI compile: seconds
        pool.submit(p.QueryRequest(key="spike", program=p.StandaloneScript(script)))
        while pool.in_flight():
            answered += pool.wait()
            waiting.add(pool.waiting_for_memory())
    finally:
        pool.close()
    # the spike's first answer (out of memory) was no result; it ran again once the compile beside it had ended
    assert [r.query.key for r in answered] == ["beside", "spike"]
    assert [r.outcome.status for r in answered] == ["passed", "passed"]
    assert 1 in waiting and "can't allocate memory" in pool.memory_detail


def test_a_query_short_of_memory_even_alone_gets_what_it_raised_as_its_verdict(tmp_path):
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        pool.submit(p.QueryRequest(key="spike", program=p.StandaloneScript(spike_script(tmp_path, once=False))))
        [answered] = pool.wait()  # its first answer was no result: it waited, then ran alone
    finally:
        pool.close()
    assert answered.outcome.status == "raised" and "can't allocate memory" in answered.outcome.text


def test_memory_that_runs_out_loading_the_program_is_said_so_not_called_a_corrupt_file():
    import torch

    from minifier.processes.worker import _cannot_load

    error = RuntimeError("error when deserializing")
    error.__cause__ = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 500.00 MiB")
    failed = _cannot_load("/nowhere/exported_program.pt2", error)
    assert failed.code == "environment" and "out of memory loading" in failed.message
    assert "corrupt" not in failed.message


def test_a_program_on_the_host_has_no_weights_to_hold_and_its_holder_goes_with_the_pool(tmp_path):
    # on a GPU the holder places them there once for every worker (tests/test_gpu.py); on the host they are
    # shared already, mapped from the file
    import torch

    model = torch.nn.Linear(64, 64)
    torch.export.save(torch.export.export(model, (torch.ones(2, 64),)), str(tmp_path / "x.pt2"))
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        pool.call(p.DescribeRequest())
        pool.share_weights()
        [holder] = pool.holders.values()
        while holder.state == "starting":
            pool.call(p.DescribeRequest())  # a call reads every worker's replies meanwhile
        pool.submit(p.QueryRequest(key="whole", program=ORIGINAL))
        [result] = pool.wait()
        # a worker maps the weights from the file; the holder, which runs nothing after placing them, let go of its
        # mapping (on a GPU, all the pages its upload read)
        assert mapped(pool.slots[0].proc.pid, tmp_path / "x.pt2") and not mapped(holder.proc.pid, tmp_path / "x.pt2")
    finally:
        pool.close()
    assert pool.held == {} and not pool.warnings
    assert result.outcome.status == "passed"
    assert gone(holder.proc.pid)


def test_no_query_or_call_starts_beside_a_holder_that_is_placing_the_weights(tmp_path):
    # else it would place a second copy of them (here, on the host, the holder answers that it holds none)
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=1, start_timeout=120))
    try:
        pool.call(p.DescribeRequest())
        pool.share_weights()
        [holder] = pool.holders.values()
        pool.submit(p.QueryRequest(key="whole", program=ORIGINAL))
        assert holder.state == "starting" and not pool.running("whole")
        [result] = pool.wait()
        assert holder.state == "idle"
    finally:
        pool.close()
    assert result.outcome.status == "passed"


def mapped(pid: int, path) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_a_query_whose_need_does_not_fit_beside_the_running_ones_waits_for_them(tmp_path):
    save_relu_program(tmp_path)
    pool = Pool(config(tmp_path, size=2, start_timeout=120))
    try:
        pool.call(p.DescribeRequest())  # both workers up
        pool.memory_budget[""] = 100  # the GPU's bytes, as devices.plan_gpu_memory sets them
        pool.submit(p.QueryRequest(key="first", program=ORIGINAL), need=60)
        pool.submit(p.QueryRequest(key="second", program=ORIGINAL, own_cache=True), need=60)
        answered, waited = [], False
        while pool.in_flight():
            answered += pool.wait(until=time.monotonic() + 0.2)
            assert not (pool.running("first") and pool.running("second"))
            waited |= pool.waiting_for_memory() == 1
    finally:
        pool.close()
    assert [(r.query.key, r.outcome.status) for r in answered] == [("first", "passed"), ("second", "passed")]
    assert waited


def test_a_querys_need_is_the_weights_it_reads_unless_held_and_the_values_it_is_fed_and_makes():
    from minifier.driver.devices import need
    from minifier.exchange.worker_protocol import GraphInfo, NodeInfo

    def node(name, kind, size, *args):
        return NodeInfo(name=name, kind=kind, target=name, op=name, args=list(args), tensor=True, bytes=size)

    graph = GraphInfo(
        nodes=[
            node("x", "input", 10),
            node("w", "param", 1000),
            node("mm", "compute", 20, "x", "w"),
            node("relu", "compute", 20, "mm"),
        ],
        outputs=["relu"],
        code="",
        torch_version="",
        device="cuda:0",
    )
    assert need(graph, None, held=False) == 1000 + 10 + 20 + 20
    assert need(graph, None, held=True) == 10 + 20 + 20
    assert need(graph, {"relu"}, held=False) == 20 + 20  # fed mm's value, makes its own


def test_a_run_compared_with_eager_needs_the_fp32_copy_of_half_precision_weights_beside_it():
    from minifier.driver.devices import reference_need
    from minifier.exchange.worker_protocol import GraphInfo, NodeInfo

    def param(name, shape, size):
        return NodeInfo(name=name, kind="param", target=name, op=name, args=[], tensor=True, shape=shape, bytes=size)

    nodes = [param("w", "bfloat16[16, 16]", 512), param("b", "float32[16]", 64), param("h", "float16[8]", 16)]
    graph = GraphInfo(nodes=nodes, outputs=[], code="", torch_version="", device="cuda:0")
    assert reference_need(graph) == 2 * (512 + 16)  # the fp32 stand-in's copy; fp32 weights are their own
    assert reference_need(GraphInfo(nodes=nodes, outputs=[], code="", torch_version="", device="cpu")) == 0


def test_a_model_that_cannot_run_in_fp64_is_compared_in_its_own_precision():
    # The accuracy check's fp64 reference fails for such a model (a bf16 Llama on the GPU did): an fp32 run stands
    # in, so that a matching run passes and a diverging one is still an accuracy failure.
    torch = pytest.importorskip("torch")
    from torch._dynamo.debug_utils import AccuracyError

    from minifier.processes.accuracy import check_accuracy

    class NoFp64(torch.nn.Module):
        def __init__(self, shift: float = 0.0) -> None:
            super().__init__()
            self.shift = shift

        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("this model has no float64 kernel")
            return (x * 2 + self.shift,)

    args = (torch.randn(8),)
    check_accuracy(NoFp64(), NoFp64(), args, "accuracy")
    with pytest.raises(AccuracyError):
        check_accuracy(NoFp64(), NoFp64(shift=1.0), args, "accuracy")


def test_an_exported_half_precision_model_that_casts_is_compared_against_its_fp32_reference():
    # export checks the dtype before each cast (`_assert_tensor_metadata`): a bf16 Llama's RMSNorm made its fp64 and
    # fp32 references fail on them, and triage rejected a workaround that ran ("Tensor dtype mismatch").
    torch = pytest.importorskip("torch")
    from torch._dynamo.debug_utils import AccuracyError

    from minifier.processes.accuracy import check_accuracy

    class Norm(torch.nn.Module):
        def __init__(self, shift: float = 0.0) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(64, dtype=torch.bfloat16))
            self.shift = shift

        def forward(self, x):
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (self.weight * h.to(torch.bfloat16) + self.shift,)

    args = (torch.randn(4, 64, dtype=torch.bfloat16),)
    eager = torch.export.export(Norm(), args).module()
    shifted = torch.export.export(Norm(shift=0.5), args).module()
    shifted.load_state_dict(eager.state_dict())
    check_accuracy(eager, eager, args, "accuracy")
    with pytest.raises(AccuracyError):
        check_accuracy(eager, shifted, args, "accuracy")


def test_a_cancel_that_lands_as_a_worker_exit_is_read_keeps_the_exit(monkeypatch):
    # A SIGTERM raised between reading the fork server's message and recording it lost the exit, and the
    # shutdown that followed waited for it forever (a cancelled minify hung once under load).
    from minifier.contract import interrupts

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = ForkServer(ours)
    decode = fp.decode

    def decoded_as_the_signal_lands(record):
        message = decode(record)
        os.kill(os.getpid(), signal.SIGTERM)
        return message

    monkeypatch.setattr(fp, "decode", decoded_as_the_signal_lands)
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    try:
        theirs.send(fp.encode(fp.Exited(pid=4321, returncode=-9)))
        with pytest.raises(KeyboardInterrupt):
            server.receive(timeout=5, until=fp.Exited)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        theirs.close()
        server.close()
    assert server.exits == {4321: -9}


def test_a_graph_with_quantized_tensors_is_refused_in_one_line_that_says_why():
    # a torch.compile launcher whose graph quantizes (a QAT-converted model) cannot be traced with fake tensors;
    # the dispatcher's message lists every backend after its first sentence
    torch = pytest.importorskip("torch")
    from minifier.processes.worker import one_line

    with pytest.raises(NotImplementedError) as raised:
        torch.empty_strided((2,), (1,), device="meta", dtype=torch.quint8)
    line = one_line(raised.value)
    assert line == (
        "NotImplementedError: Could not run 'aten::empty_strided' with arguments from the 'QuantizedMeta' backend. "
        "Quantized tensors have no fake-tensor form, which tracing the graph needs."
    )

"""Inductor's CPU vector ISA probe, made once per fork server instead of once per worker.

The first AOTI compile of a process (CUDA ones too) asks Inductor which CPU vector ISAs build and load: per check a
g++ build and a child Python that loads the result, one check after another. Torch 2.11's child imports torch,
which made each fresh worker's first passing compile far longer. The fork server has a throwaway child run the
probe (nothing it does can touch the server, CUDA included), recording the answer of each build check; the server
then runs Inductor's own probe with those answers in place of the builds, and every worker forked after inherits
the result. In that child a check loads its build without importing torch first (torch's own since 2.13), and only
a load that fails so is tried Inductor's way: the torch import was most of each check. A worker forked before takes
the same answer from a `SharedAnswer` before its first compile: the early workers' own probes would queue with the
child's on Inductor's per-ISA file locks, in front of the original's compile.
Imports torch; used by the fork server and the workers only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

# How long a worker waits for the fork server's answer before it probes itself (its child hung): well over a
# slow machine's whole probe.
ANSWER_WAIT = 120.0


def probe() -> dict[str, bool] | None:
    """Run Inductor's probe, recording each build check it makes: check -> passed. None where this torch
    has no such probe."""
    found: dict[str, bool] = {}

    def recording(check_build, isa, code: str) -> bool:
        found[_check(isa, code)] = passed = check_build(isa, code)
        return passed

    with _loads_without_torch_import():
        probed = _probe_with(recording, side_by_side=True)
    return found if probed is not None else None


def adopt(found: dict[str, bool]) -> list[str] | None:
    """Run Inductor's probe with each build check answered from `found` (a `probe` made in a process
    forked from this one, so the same checks in the same order; a check not in it is built for real):
    the ISAs it takes, best first. None where this torch has no such probe."""

    def replaying(check_build, isa, code: str) -> bool:
        answer = found.get(_check(isa, code))
        return check_build(isa, code) if answer is None else answer

    return _probe_with(replaying, side_by_side=False)


class SharedAnswer:
    """The fork server's probe answer, for the workers it forked before it had one: an anonymous file made
    before its first fork, so that every worker holds it, written once: the answers as JSON, or null where
    none will come, then a newline (written last, so that a reader that sees it sees the whole answer)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def create(cls) -> SharedAnswer:
        return cls(os.memfd_create("aoti-lens-cpu-isa", os.MFD_CLOEXEC))

    def publish(self, found: dict[str, bool] | None) -> None:
        if os.fstat(self.fd).st_size:
            return  # answered already
        body = json.dumps(found).encode()
        os.pwrite(self.fd, body, 0)
        os.pwrite(self.fd, b"\n", len(body))

    def wait(self, timeout: float) -> dict[str, bool] | None:
        """The answer, once published; None where it says none will come, or none came in `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            size = os.fstat(self.fd).st_size
            data = os.pread(self.fd, size, 0) if size else b""
            if data.endswith(b"\n"):
                found = json.loads(data)
                return found if isinstance(found, dict) else None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def ensure(config_patches: dict, shared: SharedAnswer | None = None, wait: float = ANSWER_WAIT) -> str:
    """Have the answer before a compile, unless this process has it (inherited, or from an earlier compile)
    or the launcher sets cpp.vec_isa_ok (its compile then needs no build check): `shared`'s answer where it
    gives one, else a probe of its own, side by side. Says which, for the worker's log ("" for neither)."""
    try:
        from torch._inductor import config, cpu_vec_isa
    except ImportError:
        return ""
    if _sets_vec_isa_ok(config, config_patches) or cpu_vec_isa.valid_vec_isa_list.cache_info().currsize:
        return ""
    started = time.monotonic()
    found = shared.wait(wait) if shared is not None else None
    if found is not None and adopt(found) is not None:
        return f"adopted the fork server's CPU vector ISA probe after {time.monotonic() - started:.1f} s"
    _probe_with(lambda check_build, isa, code: check_build(isa, code), side_by_side=True)
    return f"probed the CPU vector ISAs in {time.monotonic() - started:.1f} s"


def forget_inherited(config_patches: dict) -> None:
    """The fork server probed with Inductor's default cpp.vec_isa_ok, which skips the build checks when
    set: a launcher that sets it (in its config lines, applied by now, or its patches) probes its own."""
    isa, config = sys.modules.get("torch._inductor.cpu_vec_isa"), sys.modules.get("torch._inductor.config")
    if isa is None or config is None:
        return  # nothing probed, nothing inherited
    if _sets_vec_isa_ok(config, config_patches):
        forget()


def _sets_vec_isa_ok(config, config_patches: dict) -> bool:
    return config.cpp.vec_isa_ok is not None or "cpp.vec_isa_ok" in config_patches


def forget() -> None:
    """Drop every answer of the probe this process holds (Inductor caches them per ISA class)."""
    isa = sys.modules.get("torch._inductor.cpu_vec_isa")
    if isa is None:
        return
    isa.valid_vec_isa_list.cache_clear()
    for cls in {isa.VecISA, *(type(i) for i in getattr(isa, "supported_vec_isa_list", ()))}:
        for cached in vars(cls).values():
            if callable(getattr(cached, "cache_clear", None)):
                cached.cache_clear()


def _probe_with(check, side_by_side: bool) -> list[str] | None:
    try:
        from torch._inductor import cpu_vec_isa

        check_build = cpu_vec_isa.VecISA.check_build
    except (ImportError, AttributeError):
        return None
    cpu_vec_isa.VecISA.check_build = lambda isa, code: check(check_build, isa, code)
    try:
        if side_by_side:
            _each_isa_in_a_thread(cpu_vec_isa)
        return [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    finally:
        cpu_vec_isa.VecISA.check_build = check_build


def _each_isa_in_a_thread(cpu_vec_isa) -> None:
    """Answer (and cache) each ISA that the CPU's flags allow in a thread of its own: ISAs share no state,
    their checks wait on child processes, so all of them take about as long as the slowest. The
    list is then made from the cached answers, in Inductor's own order."""
    try:
        flags = cpu_vec_isa.x86_isa_checker()
        isas = [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(isa).split())]
    except AttributeError:
        return  # another torch: its own probe, one check after another
    threads = [threading.Thread(target=bool, args=(isa,), name=f"probe {isa}") for isa in isas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@contextlib.contextmanager
def _loads_without_torch_import():
    """Inductor's load checks, as `probe` runs them: a child Python that only loads the build, torch's
    libraries found on LD_LIBRARY_PATH (as torch 2.13 does), where this torch's check imports torch first.
    A build that does not load so is checked again Inductor's way, so the answer is never "no" where
    Inductor's own check would say "yes"; a "yes" is a load that worked."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        yield
        return
    real = cpu_vec_isa.subprocess
    cpu_vec_isa.subprocess = _LightLoads(real)
    try:
        yield
    finally:
        cpu_vec_isa.subprocess = real


class _LightLoads:
    """`subprocess` as cpu_vec_isa sees it during a probe: a load check that would import torch first is
    tried without the import first."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def run(self, cmd, *args, **kwargs):
        return self._real.CompletedProcess(cmd, 0) if self._loads(cmd, kwargs) else self._real.run(cmd, *args, **kwargs)

    def check_call(self, cmd, *args, **kwargs):
        return 0 if self._loads(cmd, kwargs) else self._real.check_call(cmd, *args, **kwargs)

    def _loads(self, cmd, kwargs: dict) -> bool:
        light = light_load(cmd)
        if light is None:
            return False
        env = dict(kwargs.get("env") or os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [_torch_lib(), env.get("LD_LIBRARY_PATH")]))
        try:
            return (
                self._real.run(
                    light,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    cwd=kwargs.get("cwd"),
                    timeout=60,
                ).returncode
                == 0
            )
        except (OSError, subprocess.SubprocessError):
            return False


def light_load(cmd) -> list[str] | None:
    """`cmd` without its `import torch` line, where it is a load check (`python -c` code that loads a
    library) that imports torch first; None for anything else."""
    if not (isinstance(cmd, (list, tuple)) and len(cmd) == 3 and cmd[1] == "-c" and isinstance(cmd[2], str)):
        return None
    lines = cmd[2].splitlines()
    kept = [line for line in lines if line.strip() != "import torch"]
    if len(kept) == len(lines) or "LoadLibrary" not in cmd[2]:
        return None
    return [cmd[0], "-c", "\n".join(kept)]


def _torch_lib() -> str:
    import torch

    return os.path.join(os.path.dirname(torch.__file__), "lib")


def _check(isa, code: str) -> str:
    """One build check: the ISA, its flags at the time (a check may add some) and the code built."""
    return f"{isa} [{isa.build_arch_flags()}] {hashlib.sha256(code.encode()).hexdigest()[:16]}"

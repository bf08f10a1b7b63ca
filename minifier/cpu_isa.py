"""Inductor's CPU vector ISA probe, made once per fork server instead of once per worker.

The first AOTI compile of a process (CUDA ones too) asks Inductor which CPU vector ISAs build and load:
per check a g++ build and a child Python that loads the result, under a lock that every worker of a run
shares. Torch 2.11's child imports torch, and on the H200 that made each fresh worker's first passing
compile 50 s longer. The fork server has a throwaway child run the probe (nothing it does can touch the
server, CUDA included), recording the answer of each build check; the server then runs Inductor's own
probe with those answers in place of the builds, and every worker forked after inherits the result.
Imports torch; used by the fork server and the workers only.
"""

from __future__ import annotations

import hashlib
import sys


def probe() -> dict[str, bool] | None:
    """Run Inductor's probe, recording each build check it makes: check -> passed. None where this torch
    has no such probe."""
    found: dict[str, bool] = {}

    def recording(check_build, isa, code: str) -> bool:
        found[_check(isa, code)] = passed = check_build(isa, code)
        return passed

    return found if _probe_with(recording) is not None else None


def adopt(found: dict[str, bool]) -> list[str] | None:
    """Run Inductor's probe with each build check answered from `found` (a `probe` made in a process
    forked from this one, so the same checks in the same order; a check not in it is built for real):
    the ISAs it takes, best first. None where this torch has no such probe."""
    def replaying(check_build, isa, code: str) -> bool:
        answer = found.get(_check(isa, code))
        return check_build(isa, code) if answer is None else answer

    return _probe_with(replaying)


def forget_inherited(config_patches: dict) -> None:
    """The fork server probed with Inductor's default cpp.vec_isa_ok, which skips the build checks when
    set: a launcher that sets it (in its config lines, applied by now, or its patches) probes its own."""
    isa, config = sys.modules.get("torch._inductor.cpu_vec_isa"), sys.modules.get("torch._inductor.config")
    if isa is None or config is None:
        return  # nothing probed, nothing inherited
    if config.cpp.vec_isa_ok is not None or "cpp.vec_isa_ok" in config_patches:
        forget()


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


def _probe_with(check) -> list[str] | None:
    try:
        from torch._inductor.cpu_vec_isa import VecISA, valid_vec_isa_list
        check_build = VecISA.check_build
    except (ImportError, AttributeError):
        return None
    VecISA.check_build = lambda isa, code: check(check_build, isa, code)
    try:
        return [str(isa) for isa in valid_vec_isa_list()]
    finally:
        VecISA.check_build = check_build


def _check(isa, code: str) -> str:
    """One build check: the ISA, its flags at the time (a check may add some) and the code built."""
    return f"{isa} [{isa.build_arch_flags()}] {hashlib.sha256(code.encode()).hexdigest()[:16]}"

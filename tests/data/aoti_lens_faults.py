"""A custom op that misbehaves on request, for the fault tests (`--import aoti_lens_faults`).

`aoti_lens_faults::fault(x)` returns x + 1, after doing what AOTI_LENS_FAULT says, whenever it runs
on real tensors (the eager run that saves the graph's values, and any compiled candidate that keeps
it): `spam` prints megabytes of garbage to stdout and stderr, `hog` allocates until the kernel's OOM
killer ends the process (run it in a memory cgroup: AOTI_LENS_FAULT_CGROUP names its cgroup.procs),
`hang` blocks every signal it can and sleeps in C.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import torch

_MiB = 1 << 20


@torch.library.custom_op("aoti_lens_faults::fault", mutates_args=())
def fault(x: torch.Tensor) -> torch.Tensor:
    misbehave(os.environ.get("AOTI_LENS_FAULT", ""))
    return x + 1


@fault.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def misbehave(what: str) -> None:
    if what == "spam":
        garbage = bytes(range(256)) * (_MiB // 256)
        for _ in range(24):  # 48 MiB: past the log limit of a worker
            os.write(1, garbage)
            os.write(2, b"\x00\xff\xfe not utf-8 " + garbage + b"\n")
        print("x" * (4 * _MiB), flush=True)  # one 4 MiB line
    elif what == "hog":
        with open(os.environ["AOTI_LENS_FAULT_CGROUP"], "w") as f:
            f.write(str(os.getpid()))
        hoard = []
        while True:
            hoard.append(bytearray(64 * _MiB))  # zero-filled: every page touched
    elif what == "hang":
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        ctypes.CDLL(None).sleep(3600)  # in C, signals blocked: only SIGKILL ends it
    elif what:
        sys.exit(f"AOTI_LENS_FAULT={what!r}: expected spam, hog or hang")


class Model(torch.nn.Module):
    """relu carries Inductor's injected bug; the faulty op sits on a branch of its own."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(x), torch.ops.aoti_lens_faults.fault(x)


def dump(out: str) -> str:
    """Have PyTorch dump the model's AOTI compile failure under `out`; returns the launcher."""
    import glob

    import torch._dynamo.config
    import torch._inductor.config as config

    torch._dynamo.config.debug_dir_root = os.path.join(os.path.abspath(out), "torch_compile_debug")
    config.aot_inductor.dump_aoti_minifier = True
    config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"
    inputs = (torch.randn(4, 8),)
    with torch.no_grad():
        program = torch.export.export(Model(), inputs)
        try:
            torch._inductor.aoti_compile_and_package(program)
        except Exception:
            pass
    [launcher] = glob.glob(os.path.join(torch._dynamo.config.debug_dir_root, "run_*", "minifier",
                                        "minifier_launcher.py"))
    return launcher


if __name__ == "__main__":
    print(dump(sys.argv[1]))

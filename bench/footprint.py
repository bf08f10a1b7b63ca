"""What a command costs beside its time: the peak summed PSS of its process tree (host memory, each shared page
counted once over the processes that map it), the peak GPU memory its processes hold, and the peak growth of the
folders it writes to. Sampled from /proc and nvidia-smi while it runs; Linux only.

    python bench/footprint.py --watch DIR -- aoti-minify minify LAUNCHER
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field


@dataclass
class Peaks:
    host_pss: int = 0  # bytes
    gpu: int = 0  # bytes held by the tree's processes on any GPU
    disk_growth: dict[str, int] = field(default_factory=dict)  # watched folder -> bytes


class Footprint:
    """Samples the tree under `pid` every `interval` seconds until `stop`."""

    def __init__(self, pid: int, watch: list[str], interval: float = 0.2) -> None:
        self.pid, self.interval = pid, interval
        self.base = {folder: folder_bytes(folder) for folder in watch}
        self.peaks = Peaks(disk_growth={folder: 0 for folder in watch})
        self._stop = threading.Event()
        self._gpu = shutil.which("nvidia-smi") is not None
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._thread.start()

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join()
        self.sample()  # what the tree left on disk at the end
        return self.peaks

    def _sample_until_stopped(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        pids = tree(self.pid)
        self.peaks.host_pss = max(self.peaks.host_pss, sum(pss(p) for p in pids))
        if self._gpu:
            self.peaks.gpu = max(self.peaks.gpu, gpu_bytes(pids))
        for folder, base in self.base.items():
            self.peaks.disk_growth[folder] = max(self.peaks.disk_growth[folder], folder_bytes(folder) - base)


def tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc's parent links (a fork server started with setsid is still a child)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def gpu_bytes(pids: list[int]) -> int:
    """GPU memory the processes hold, as nvidia-smi counts it per process (their CUDA contexts included)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    wanted, total = set(pids), 0
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and int(pid) in wanted and mib.strip().isdigit():
            total += int(mib) << 20
    return total


def folder_bytes(folder: str) -> int:
    """The bytes the files under `folder` take on disk (a sparse file counts what it uses, hard links once)."""
    seen: dict[tuple[int, int], int] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            seen[(stat.st_dev, stat.st_ino)] = stat.st_blocks * 512
    return sum(seen.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--watch", action="append", default=[], help="a folder whose growth is measured")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    proc = subprocess.Popen(command)
    footprint = Footprint(proc.pid, args.watch)
    code = proc.wait()
    print(json.dumps({"exit": code, "seconds": round(time.monotonic() - start, 1), **asdict(footprint.stop())}))
    return code


if __name__ == "__main__":
    sys.exit(main())

"""What a .pt2 archive holds, read without torch: where each tensor payload lies in the file.

torch.export.save writes a zip whose tensor payloads (`data/weights/<file>`, `data/constants/<file>`) are stored
uncompressed: so their bytes can be counted before any worker loads the program (how much memory a candidate
needs), and mapped from the file instead of read (every worker then shares one copy, the page cache's).
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from dataclasses import dataclass

PAYLOAD_DIRS = ("data/weights/", "data/constants/")
# From this many bytes of weights on, a program is big: its packages leave them out, and on a GPU one process
# holds them for every worker (minifier.program.weights); below, every package is built as the user's was.
BIG_WEIGHTS = 1 << 30
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip entry's local file header, before its name and extra field


@dataclass(frozen=True)
class Payload:
    """One stored tensor file: its record name inside the archive (`data/weights/weight_0`), where its bytes
    start in the .pt2 file, and how many there are."""

    record: str
    offset: int
    size: int


def payloads(pt2: str) -> dict[str, Payload]:
    """The archive's uncompressed tensor files by record name (the archive's own top folder left out);
    configs and pickled payloads are not tensors and are left out too."""
    found: dict[str, Payload] = {}
    with zipfile.ZipFile(pt2) as archive, open(pt2, "rb") as raw:
        for info in archive.infolist():
            _, _, record = info.filename.partition("/")
            if not record.startswith(PAYLOAD_DIRS) or record.endswith(".json"):
                continue
            if info.compress_type != zipfile.ZIP_STORED:
                continue
            found[record] = Payload(record, _data_offset(raw, info), info.file_size)
    return found


def weight_bytes(pt2: str) -> int:
    """The bytes of the program's weights and tensor constants, as stored (0 for what cannot be read as a .pt2)."""
    try:
        return sum(p.size for p in payloads(pt2).values())
    except (OSError, zipfile.BadZipFile):
        return 0


def refers_to_original(pt2: str) -> bool:
    """Whether the program holds weights saved as one-element views (all strides 0) of their shape: those of the
    original program, which the worker left out of a candidate it saved (minifier.program.weights)."""
    try:
        with zipfile.ZipFile(pt2) as archive:
            configs = [
                json.loads(archive.read(name))
                for name in archive.namelist()
                if name.partition("/")[2].startswith(PAYLOAD_DIRS) and name.endswith("_config.json")
            ]
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return any(_referenced(meta.get("tensor_meta") or {}) for c in configs for meta in c.get("config", {}).values())


def _referenced(tensor_meta: dict) -> bool:
    sizes = [s.get("as_int") for s in tensor_meta.get("sizes", [])]
    strides = [s.get("as_int") for s in tensor_meta.get("strides", [])]
    known = all(isinstance(n, int) for n in sizes + strides)
    return known and math.prod(sizes) > 1 and not any(strides)


def _data_offset(raw, info: zipfile.ZipInfo) -> int:
    """Where an entry's bytes start: after its local header, whose name and extra field (PyTorch pads the extra
    field to align each payload) may differ from the central directory's."""
    raw.seek(info.header_offset)
    header = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
    name_length, extra_length = header[-2], header[-1]
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length

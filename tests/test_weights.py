"""A program's weights held once: mapped from its .pt2, referred to (not copied) by the candidates a worker saves,
and a big model minified on the CPU within issue 44's bounds (host memory, disk)."""

import os
import subprocess
import sys
import zipfile

import pytest
import torch
from conftest import ROOT, child_env, done_of, events_of, repro_signature

from minifier.contract.archive import payloads, refers_to_original, weight_bytes
from minifier.contract.artifacts import weights_of
from minifier.contract.events import StartEvent
from minifier.contract.layout import DumpLayout, checkpoint_nodes
from minifier.program.weights import load_mapped, referring_to, restore_referenced

sys.path.insert(0, os.path.join(ROOT, "bench"))
from footprint import Footprint


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2048, 2048)  # 16 MiB of fp32
        self.register_buffer("shift", torch.randn(2048))

    def forward(self, x):
        return torch.relu(self.linear(x)) + self.shift


def saved_blocks(path, blocks: int = 5) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(Block() for _ in range(blocks)))
    program = torch.export.export(model, (torch.randn(2, 2048),))
    torch.export.save(program, str(path))
    return program


def test_the_weights_are_mapped_from_the_file_where_the_archive_says_their_bytes_are(tmp_path):
    path = tmp_path / "blocks.pt2"
    saved = saved_blocks(path)
    mapped = load_mapped(str(path))
    assert weight_bytes(str(path)) == sum(p.size for p in payloads(str(path)).values()) >= 5 * 2048 * 2049 * 4
    for name, tensor in saved.state_dict.items():
        assert torch.equal(mapped.state_dict[name], tensor)
        assert isinstance(mapped.state_dict[name], torch.nn.Parameter) == isinstance(tensor, torch.nn.Parameter)
    # each payload read straight from the file at its offset: the bytes the tensor holds
    raw = path.read_bytes()
    weight = payloads(str(path))["data/weights/weight_0"]
    first = next(iter(mapped.state_dict.values()))
    assert raw[weight.offset : weight.offset + 64] == first.detach().numpy().tobytes()[:64]
    assert torch.equal(mapped.module()(saved.example_inputs[0][0]), saved.module()(saved.example_inputs[0][0]))


def test_a_saved_candidate_refers_to_the_originals_weights_and_gets_them_back(tmp_path):
    original = saved_blocks(tmp_path / "original.pt2")
    with referring_to(original, original):  # a candidate holding all of them: 80 MiB, over REFERENCE_FROM
        torch.export.save(original, str(tmp_path / "candidate.pt2"))
    assert all(isinstance(t, torch.Tensor) and any(t.stride()) for t in original.state_dict.values())  # restored
    assert os.path.getsize(tmp_path / "candidate.pt2") < 1 << 20
    assert refers_to_original(str(tmp_path / "candidate.pt2"))
    assert not refers_to_original(str(tmp_path / "original.pt2"))
    candidate = torch.export.load(str(tmp_path / "candidate.pt2"))
    loaded = restore_referenced(candidate, load_mapped(str(tmp_path / "original.pt2")))
    x = original.example_inputs[0][0]
    assert torch.equal(loaded.module()(x), original.module()(x))


def test_a_candidate_holding_few_of_the_originals_weights_keeps_them(tmp_path):
    original = saved_blocks(tmp_path / "original.pt2", blocks=1)  # 16 MiB: one file is simpler than a reference
    with referring_to(original, original):
        torch.export.save(original, str(tmp_path / "candidate.pt2"))
    assert not refers_to_original(str(tmp_path / "candidate.pt2"))


# 12 Linear(8192, 8192) in fp32: 3 GiB of weights, which fixed costs (torch in each process, g++) do not hide
BIG = "nn-wider_mlp12-relu-compile_error"


@pytest.mark.slow
@pytest.mark.compile
def test_a_big_model_minifies_with_its_weights_held_once_and_none_copied_to_disk(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), workload=BIG)
    layout = DumpLayout.of(launcher)
    weights = weight_bytes(layout.exported_program)
    assert weights > 3 * 2**30
    # --no-slice: the general search's halves and quarters, checkpoints of gigabytes of weights each
    argv = [sys.executable, "-m", "minifier", "minify", launcher, "--events", "--workers", "2", "--no-slice"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=child_env())
    footprint = Footprint(proc.pid, [layout.run_dir])
    out, err = proc.communicate(timeout=900)
    peaks = footprint.stop()
    assert proc.returncode == 0, err[-4000:]
    done = done_of(events_of(out))
    assert peaks.host_pss < 1.5 * weights, (peaks.host_pss, weights)
    assert peaks.disk_growth[layout.run_dir] < weights / 10, (peaks.disk_growth, weights)
    # the checkpoints of more than a few nodes refer to the original's weights, and reproduce from their folder
    folder = os.path.dirname(layout.exported_program)
    scripts = sorted(
        (os.path.join(folder, name) for name in os.listdir(folder) if checkpoint_nodes(name) is not None),
        key=lambda path: checkpoint_nodes(os.path.basename(path)) or 0,
    )
    referring = [s for s in scripts if weights_of(open(s).read(), s)]
    assert referring and all(weights_of(open(s).read(), s) == layout.exported_program for s in referring)
    target = next(e for e in events_of(out) if isinstance(e, StartEvent)).signature
    assert repro_signature(referring[0]).matches(target)
    assert repro_signature(done.repro).matches(target)
    assert zipfile.is_zipfile(layout.repro_pt2)

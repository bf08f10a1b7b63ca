"""A user-written Triton kernel that reads out of bounds, wrapped as a custom op (`--import` this module).

It is the kind of real bug no injection covers: an illegal memory access inside a kernel the user
owns, which leaves the process's CUDA context unusable.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

FAR_AWAY = 1 << 30  # elements past the input: far outside anything the caching allocator maps


@triton.jit
def _shifted_copy_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    values = tl.load(x_ptr + offsets + shift, mask=mask)  # the bug: `shift` is never checked
    tl.store(out_ptr + offsets, values, mask=mask)


@triton_op("aoti_lens_examples::shifted_copy", mutates_args={})
def shifted_copy(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(_shifted_copy_kernel)[(triton.cdiv(n, 128),)](x, out, n, FAR_AWAY, BLOCK=128)
    return out


class OutOfBounds(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(10, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(shifted_copy(torch.relu(self.fc(x))))

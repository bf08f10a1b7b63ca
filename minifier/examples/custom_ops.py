"""Custom ops whose fake (meta) kernels lie, as users write them (`--import` this module).

A fake kernel tells export and Inductor what an op returns without running it. When it is wrong,
eager runs are right and only the compiled program reads the op's output with the wrong shape: no
error, wrong numbers (an accuracy failure at repro level 4). Imports torch only, so that every
worker that loads a program using these ops can register them.
"""

from __future__ import annotations

import torch
from torch.library import custom_op

# The longest sequence `pool_tokens`'s fake kernel assumes when it cannot read the length.
MAX_TOKENS = 20


@custom_op("aoti_lens_examples::row_scale", mutates_args=())
def row_scale(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm's per-row factor, shape (..., 1), for `x * row_scale(x)`."""
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@row_scale.register_fake
def _row_scale_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)  # the lie: copied from an elementwise op, it drops the keepdim reduction


@custom_op("aoti_lens_examples::pool_tokens", mutates_args=())
def pool_tokens(x: torch.Tensor) -> torch.Tensor:
    """Running mean over the tokens of (batch, tokens, features)."""
    counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device).view(1, -1, 1)
    return x.cumsum(1) / counts


@pool_tokens.register_fake
def _pool_tokens_fake(x: torch.Tensor) -> torch.Tensor:
    tokens = x.shape[1]
    if isinstance(tokens, torch.SymInt):
        # The lie appears only under dynamic shapes: with a symbolic length the author "allocates for
        # the longest sequence", so the compiled program reads past the real output.
        tokens = MAX_TOKENS
    return x.new_empty(x.shape[0], tokens, x.shape[2])

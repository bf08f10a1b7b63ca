"""The seed example and the residual-block family used across tests and the benchmark."""

from __future__ import annotations

import torch
from torch import nn


class Seed(nn.Module):
    """Linear(10, 16) -> ReLU -> Sigmoid: the smallest model that reaches Inductor's relu bug."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.relu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Residual(nn.Module):
    """`blocks` residual blocks with one ReLU in the middle and a linear head."""

    def __init__(self, blocks: int = 6, width: int = 16) -> None:
        super().__init__()
        self.first = nn.Sequential(*[Block(width) for _ in range(blocks // 2)])
        self.second = nn.Sequential(*[Block(width) for _ in range(blocks - blocks // 2)])
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.second(torch.relu(self.first(x))))


def build(name: str, blocks: int = 6) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "seed":
        return Seed(), (torch.randn(8, 10),)
    if name == "residual":
        return Residual(blocks), (torch.randn(8, 16),)
    raise ValueError(f"unknown example model {name!r} (seed, residual)")

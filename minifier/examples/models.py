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


class Parity(nn.Module):
    """The program of PyTorch's test_accuracy_vs_strict_accuracy (test/inductor/test_minifier.py): with relu's
    and log1p's accuracy bugs both injected, the output depends only on relu, while the boolean mask made from
    log1p differs; --strict-accuracy localizes to log1p, --accuracy to relu."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.logical_not(torch.logical_not(torch.log1p(x) > 0))
        x = torch.relu(x)
        return torch.where(mask, x, x)


class Selected(nn.Module):
    """Linear, then ReLU on the entries a data-dependent mask selects: the ReLU's input has an unbacked size
    (nonzero's), so no cut may feed it a concrete tensor in place of the nodes that bind that size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.relu(h[h > 0.1]).sum() + h.sum()


class Looped(nn.Module):
    """Linear, then a torch while_loop whose body holds the only ReLU, then Sigmoid: a higher-order op
    minified as a unit with its subgraphs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        start = (torch.zeros((), dtype=torch.int64, device=x.device), self.fc(x))
        _, h = while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, torch.relu(h) * 0.5), start)
        return torch.sigmoid(h)


TOY_MODELS = ("seed", "residual", "parity", "selected", "looped")


def build(name: str, blocks: int = 6) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "seed":
        return Seed(), (torch.randn(8, 10),)
    if name == "residual":
        return Residual(blocks), (torch.randn(8, 16),)
    if name == "parity":
        return Parity(), (torch.randn(20),)
    if name == "selected":
        return Selected(), (torch.randn(8, 10),)
    if name == "looped":
        return Looped(), (torch.randn(8, 10),)
    raise ValueError(f"unknown example model {name!r} ({', '.join(TOY_MODELS)})")

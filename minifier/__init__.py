"""aoti-lens minifier: reproduce and shrink PyTorch AOTInductor failures.

The driver modules are torch-free; the language server imports only the CLI contract (`events`), the
readers of a dump and the process helpers (see docs/architecture.md). Only the worker process and
`minifier.program.graph` import torch.
"""

__version__ = "0.1.0"

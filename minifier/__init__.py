"""aoti-lens minifier: reproduce and shrink PyTorch AOTInductor failures.

Five layers, lowest first: contract/, exchange/, program/, processes/, driver/ (docs/architecture.md). The
driver is torch-free; the language server imports only contract/. Only the workers (processes/worker.py and
program/) import torch.
"""

from .contract import __version__ as __version__

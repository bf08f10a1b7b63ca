"""aoti-lens minifier: reproduce and shrink PyTorch AOTInductor failures.

The driver modules are torch-free (the language server imports the schemas); only the worker
process and `minifier.graph` import torch.
"""

__version__ = "0.1.0"

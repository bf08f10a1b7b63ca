"""The exported program's graph: candidates cut from it, torch.cond branches, a graph as plain PyTorch
code, the machine's versions. Imports torch: loaded in workers (and `python -m` children) only."""

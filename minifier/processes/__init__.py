"""The processes that import torch and may crash alone: the worker, the fork server it is forked from,
the driver's ends of both (the pool, the fork-server client), and the CPU ISA probe they share."""

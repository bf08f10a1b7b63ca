"""What passes between the minifier's processes: worker and fork-server messages, the worker log's
format, and the kernel provenance read from it. Torch-free."""

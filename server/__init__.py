"""aoti-lens language server. Never imports torch: all minifier work runs in child processes."""

__version__ = "0.1.0"

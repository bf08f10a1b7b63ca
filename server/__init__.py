"""aoti-lens language server. Never imports torch: all minifier work runs in child processes."""

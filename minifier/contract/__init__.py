"""The CLI contract and the readers of a dump: what the language server may import. Stdlib only."""

__version__ = "0.1.0"  # aoti-lens's, as pyproject.toml says

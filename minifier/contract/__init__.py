"""The CLI contract and the readers of a dump: what the language server may import. Stdlib only."""

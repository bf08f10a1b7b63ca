"""The driver: the search, verdicts, the session on one dump, the commands `run`, `minify`, `capture`,
`report`, and the command line. Torch-free."""

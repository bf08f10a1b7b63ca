"""`aoti-lsp`: the aoti-lens language server on stdio."""

from __future__ import annotations

import argparse
import logging

from . import __version__
from .protocol import PROTOCOL_VERSION


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="aoti-lsp", description=__doc__)
    parser.add_argument("--stdio", action="store_true", help="LSP on stdin/stdout (the default and only transport)")
    parser.add_argument(
        "--version", action="version", version=f"aoti-lsp {__version__} (client protocol {PROTOCOL_VERSION})"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="pygls' own logging, on stderr",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="aoti-lsp %(levelname)s %(name)s: %(message)s")
    from .server import create_server

    create_server().start_io()


if __name__ == "__main__":
    main()

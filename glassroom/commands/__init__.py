"""One module per `glassroom` subcommand: `register(subparsers)` and `run(args)`."""

from __future__ import annotations

import argparse


def new_command(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand parser that also takes `--debug` after the command name."""
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors"
    )
    return parser

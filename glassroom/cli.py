"""The `glassroom` command: parses arguments, then calls one function of a layer below.

Each subcommand lives in glassroom/commands/<name>.py with `register(subparsers)` (its options
and help) and `run(args) -> int`. Command modules import heavy libraries (torch) inside `run`, so
`glassroom --help` and `glassroom serve` start fast. A GlassroomError is printed as one line,
`error: ...`, with exit code 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from glassroom.version import __version__
from glassroom.errors import GlassroomError

# Order is the order of `glassroom --help`.
COMMAND_MODULES = [
    "glassroom.commands.demo",
    "glassroom.commands.plan",
    "glassroom.commands.data",
    "glassroom.commands.train",
    "glassroom.commands.export",
    "glassroom.commands.sample",
    "glassroom.commands.eval",
    "glassroom.commands.metrics",
    "glassroom.commands.runs",
    "glassroom.commands.note",
    "glassroom.commands.incident",
    "glassroom.commands.run",
    "glassroom.commands.ladder",
    "glassroom.commands.verify",
    "glassroom.commands.show",
    "glassroom.commands.serve",
    "glassroom.commands.publish",
]


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage mistakes print one line, `error: ...`, and exit 2, like every other user error."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="glassroom",
        description="Train language models in public: build a corpus, train dense and MoE "
        "transformers, run scaling ladders, watch and publish every run.",
    )
    parser.add_argument("--version", action="version", version=f"glassroom {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineErrorParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already said in one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except GlassroomError as exc:
        if args.debug:
            raise
        # one write: under torchrun (python -u) every rank says it at once, and print's two writes
        # (text, then newline) interleave into "error: ...error: ..." lines
        sys.stderr.write(f"error: {exc}\n")
        sys.stderr.flush()
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

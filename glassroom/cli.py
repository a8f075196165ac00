"""The `glassroom` command: parses arguments, then calls one function of a layer below.

Each subcommand lives in glassroom/commands/<name>.py with `register(subparsers)` (its options
and help) and `run(args) -> int`. Command modules import heavy libraries (torch) inside `run`, so
`glassroom --help` and `glassroom serve` start fast. A GlassroomError is printed as one line,
`error: ...`, with exit code 2, and so is an OSError the system raises on a path the user gave (a
name too long, a file where a folder should be, no permission); `--debug` shows the traceback instead.
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
    except OSError as exc:   # a path the system refuses (too long, not a folder, no permission, a loop)
        if args.debug:
            raise
        sys.stderr.write(f"error: {os_error(exc)}\n")
        sys.stderr.flush()
        return 2
    except ValueError as exc:
        if args.debug or "null byte" not in str(exc):
            raise
        # a path holding a NUL character (from a config file or a caller: a shell cannot pass one)
        sys.stderr.write("error: a path holds a NUL character (\\x00); no file can be named so\n")
        sys.stderr.flush()
        return 2


def os_error(exc: OSError) -> str:
    """`PATH: reason` in one line (the path cut to 120 characters)."""
    name = exc.filename if exc.filename is not None else ""
    name = str(name)
    shown = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]} ({len(name)} characters)"
    reason = exc.strerror or type(exc).__name__
    return f"{shown}: {reason}; check the path" if shown else f"{reason}"


if __name__ == "__main__":
    raise SystemExit(main())

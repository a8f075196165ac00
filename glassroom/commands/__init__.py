"""One module per `glassroom` subcommand (cli.py lists them): `register(subparsers)` and `run(args)`;
chatset.py and ladder_design.py are sub-subcommands their parent registers, sample_chat.py a helper of
sample.py. Shared here: the subcommand parser, count options and the argparse types `whole` and
`number` (glassroom/numbers.py's bounds: no 5,000-digit integer, no NaN or infinity)."""

from __future__ import annotations

import argparse

from glassroom import numbers
from glassroom.errors import GlassroomError
from glassroom.units import parse_count


def whole(text: str) -> int:
    """argparse type of a whole-number option: at most 2**63 - 1, refused in one line otherwise."""
    try:
        return numbers.option_int(text)
    except numbers.NumberError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seed(text: str) -> int:
    """argparse type of a generator seed: a whole number from 0 to 2**64 - 1 (what torch takes)."""
    try:
        value = numbers.parse_int(text.strip())
    except numbers.NumberError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 <= value <= 2 ** 64 - 1:
        got = text.strip() if len(text.strip()) <= 24 else numbers.shown(text)
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**64 - 1, got {got}")
    return value


def number(text: str) -> float:
    """argparse type of a number option: finite and of bounded length."""
    try:
        return numbers.option_float(text)
    except numbers.NumberError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def positive_count(text: str | None, option: str) -> float | None:
    """A count option such as `--tokens 18.75T`, or None when not given; a GlassroomError names the
    option when the text is not a positive count."""
    if text is None:
        return None
    try:
        value = parse_count(text)
    except ValueError as exc:
        raise GlassroomError(f"{option}: {exc}") from None
    if value <= 0:
        raise GlassroomError(f"{option}: must be positive, got {text}")
    return value

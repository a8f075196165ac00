"""Every command, every option: values a tired or hostile user gives (empty, NaN, 1e400, 5,000 digits,
a NUL character, a path too long for the system, a folder where a file goes, a binary file, a file
that is not UTF-8, YAML nested 5,000 deep, a missing path) get exit 0, 2 or 3 and, on 2, one line;
never a traceback. The cases are drawn at random (seeded) from the command tree argparse builds, so a
new command or option is covered without a line here."""

from __future__ import annotations

import argparse
import random
import signal

import pytest

from cli_helpers import glassroom_in_process
from glassroom.cli import build_parser

pytestmark = pytest.mark.slow   # a few hundred commands, some of which read torch

NOT_HERE = {("serve",), ("demo",)}   # a server that runs until stopped; the whole demo (tests/core/test_demo.py)
VALUES = ["", "nan", "-1", "1e400", "9" * 5000, "inf", "0", "-0.0", "abc", "../../../etc/passwd", "x\x00y",
          "1" * 40, "2**64", "\u202e" + "é" * 300]
TRIALS = 6


def _files(root) -> list[str]:
    (root / "empty.yaml").write_text("")
    (root / "binary.bin").write_bytes(bytes(range(256)) * 40)
    (root / "latin1.yaml").write_bytes(b"model:\n  d_model: \xff\xfe\n")
    (root / "huge.yaml").write_text("model:\n  d_model: " + "9" * 5000 + "\n")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "nan.json").write_text('{"a": NaN, "b": 1e400}')
    (root / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "folder").mkdir()
    names = ["empty.yaml", "binary.bin", "latin1.yaml", "huge.yaml", "list.yaml", "nan.json", "deep.yaml", "deep.json",
             "folder", "missing/x.yaml"]
    return [str(root / n) for n in names] + ["n" * 5000]   # the last: a name too long for the system


def _commands(parser: argparse.ArgumentParser, prefix: list[str]):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for name, sub in subs[0].choices.items():
        yield from _commands(sub, prefix + [name])


def _takes_a_value(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs != 0 and not isinstance(
        action, (argparse._HelpAction, argparse._VersionAction))


class _TooLong(Exception):
    pass


def _stop(*_):
    raise _TooLong()


@pytest.mark.parametrize("seed", range(3))
def test_every_command_answers_bad_values_in_one_line(tmp_path, seed):
    rng = random.Random(seed)
    paths = _files(tmp_path)
    commands = [(p, c) for p, c in _commands(build_parser(), []) if tuple(p) not in NOT_HERE]
    assert len(commands) >= 25   # the tree was walked (28 leaf commands)
    problems = []
    old = signal.signal(signal.SIGALRM, _stop)
    try:
        for prefix, parser in commands:
            positionals = [a for a in parser._actions if not a.option_strings]
            options = [a for a in parser._actions if _takes_a_value(a)]
            for _ in range(TRIALS):
                args = list(prefix)
                for action in positionals:
                    args += [rng.choice(paths + VALUES) for _ in range(1 if action.nargs in (None, "?") else 2)]
                for action in rng.sample(options, min(len(options), rng.randint(0, 3))):
                    args += [action.option_strings[-1], rng.choice(VALUES + paths)]
                signal.alarm(120)
                try:
                    result = glassroom_in_process(*args, cwd=tmp_path)
                except _TooLong:
                    problems.append(("still running after 120 s", [a[:40] for a in args]))
                    continue
                finally:
                    signal.alarm(0)
                lines = result.stderr.strip().splitlines()
                if "Traceback" in result.stderr or result.returncode not in (0, 2, 3) or (
                        result.returncode == 2 and len(lines) != 1):
                    problems.append((result.returncode, [a[:40] for a in args], [line[:200] for line in lines[-2:]]))
    finally:
        signal.signal(signal.SIGALRM, old)
    assert not problems, problems[:5]

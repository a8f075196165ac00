"""One store reader per run for a pass over a lab: `glassroom publish` reads each run's store through
one connection (its page data, summary, feeds, search entries, chain and ladder page) instead of
opening it again for each part.

A function that reads a run takes `readers: Optional[StoreReaders]` and opens the store with
`reading(run_dir, readers)`: the pass's shared reader (left open for the next part), or, called on
its own (the live server, a command), a new reader closed at the end. A reader opened in autocommit
mode sees every row committed before each query, so sharing one changes no value it returns.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import ContextManager, Optional

from glassroom.observe.store import StoreReader


class StoreReaders:
    """Run folder -> its StoreReader, opened on first use and kept until close()."""

    def __init__(self) -> None:
        self._open: dict[Path, StoreReader] = {}
        self.opened = 0   # how many stores this pass opened (one per run read)

    def get(self, run_dir: str | Path) -> StoreReader:
        key = Path(run_dir).resolve()   # the same run by any path (a lineage names its base resolved)
        reader = self._open.get(key)
        if reader is None:
            reader = StoreReader(run_dir)   # raises as StoreReader does: the caller decides
            self._open[key] = reader
            self.opened += 1
        return reader

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()
        self._open.clear()

    def __enter__(self) -> "StoreReaders":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reading(run_dir: str | Path, readers: Optional[StoreReaders] = None) -> ContextManager[StoreReader]:
    """`with reading(run_dir, readers) as reader:` the shared reader (not closed at the end of the
    block) or, without `readers`, a reader of its own (closed)."""
    if readers is None:
        return StoreReader(run_dir)
    return contextlib.nullcontext(readers.get(run_dir))

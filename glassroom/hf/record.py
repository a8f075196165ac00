"""An export remembered by its run: the store's `export` artifact (the newest export: folder, step,
architecture, dtype, model card) and an `export` event in the journal, so the dashboard and the
published site show the model card next to the curves it came from.

A store that cannot be written (another process holding it past the busy timeout, a read-only
copy) does not undo the export: the folder is complete; the run just does not list it.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path


def record_export(run_dir: Path, folder: Path, step: int, dtype: str) -> None:
    from glassroom.observe.store import StoreWriter, store_path  # lazy: numpy loads only when this runs

    if not store_path(run_dir).is_file():
        return
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        card = (folder / "README.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return
    architecture = (config.get("architectures") or ["?"])[0]
    now = time.time()
    value = {"folder": str(folder.resolve()), "step": step, "architecture": architecture, "dtype": dtype,
             "created": now, "created_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "card": card}
    try:
        with StoreWriter(run_dir) as store:
            store.set_artifact("export", value)
            store.event("export", f"exported step {step} as {architecture} ({dtype}) to {value['folder']}", step,
                        {k: v for k, v in value.items() if k != "card"})
            store.flush()
    except (sqlite3.DatabaseError, OSError) as exc:
        print(f"warning: {store_path(run_dir)}: the export was not recorded in the run ({exc})", file=sys.stderr)

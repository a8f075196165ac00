"""The reference log-probabilities of a DPO run: computed once from the starting model, kept in RUN_DIR.

Before step 1 (the model is then the init.from weights, at step 0) every usable train and held-out
pair's chosen and rejected log-probabilities are computed in eval mode, without gradients, and
written to RUN_DIR/dpo_reference.npy (float32, (train pairs + held-out pairs, 2): chosen, rejected)
with RUN_DIR/dpo_reference.json ({"pairs", "train_pairs", "heldout_pairs", "forwards",
"computed_at_step": 0, "digest"}), the json written last (it marks the pair complete). A resumed
run reads them back and computes nothing. The digest covers the dataset's manifest, the base
(init), seq_len and the overlong policy: a file made for other data or another base is refused,
as is a missing file once the run is past step 0 (the starting model is no longer in memory).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from glassroom.errors import GlassroomError
from glassroom.train.dpo import sequence_logps

REFERENCE_FILE = "dpo_reference.npy"
REFERENCE_META = "dpo_reference.json"


def reference_digest(dataset, cfg) -> str:
    """sha256 of what the reference depends on: the data's manifest, the base, seq_len, overlong."""
    h = hashlib.sha256((Path(dataset.path) / "manifest.json").read_bytes())
    what = {"init": cfg.init.to_dict() if cfg.init is not None else None, "seq_len": cfg.train.seq_len,
            "overlong": getattr(cfg.train, "overlong", "truncate")}
    h.update(json.dumps(what, sort_keys=True).encode())
    return h.hexdigest()


@torch.no_grad()
def pair_logps(model, pairs, micro_pairs: int, device, autocast_dtype, eos_id: int) -> tuple[np.ndarray, int]:
    """(logps (len(pairs), 2) float32 of chosen and rejected, forwards run), in eval mode."""
    was_training = model.training
    model.eval()
    out = np.zeros((len(pairs), 2), dtype=np.float32)
    forwards = 0
    for first in range(0, len(pairs), micro_pairs):
        index = np.arange(first, min(first + micro_pairs, len(pairs)))
        tokens, mask = pairs.rows(index, eos_id)
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logps = sequence_logps(model, torch.from_numpy(tokens).to(device), torch.from_numpy(mask).to(device))
        forwards += 1
        out[index] = logps.view(2, -1).T.cpu().numpy()
    if was_training:
        model.train()
    return out, forwards


def read_cached(run_dir: Path, digest: str, step: int):
    """(train logps, held-out logps, meta) from RUN_DIR, or None when it holds none and the run is at
    step 0 (the reference is computed then); a GlassroomError for a file that cannot serve this run.
    Reads only: a resume refused here changes nothing in RUN_DIR."""
    npy, meta_path = Path(run_dir) / REFERENCE_FILE, Path(run_dir) / REFERENCE_META
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            values = np.load(npy)
            n_train, n_held = int(meta["train_pairs"]), int(meta["heldout_pairs"])
            if values.shape != (n_train + n_held, 2) or values.dtype != np.float32:
                raise ValueError(f"holds {values.shape} {values.dtype}, expected ({n_train + n_held}, 2) float32")
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            raise GlassroomError(f"{npy}: the cached reference log-probabilities cannot be read ({exc}); "
                                 "start the run again in a new folder") from None
        if meta.get("digest") != digest:
            raise GlassroomError(f"{meta_path}: the reference log-probabilities were computed for other data or "
                                 "another base (digest differs); rebuilt data needs a new run folder")
        return values[:n_train], values[n_train:], meta
    if step > 0:
        raise GlassroomError(f"{meta_path}: missing, and the run is at step {step}: the reference log-probabilities "
                             "come from the starting model; start the run again in a new folder")
    return None


def load_or_compute(run_dir: Path, digest: str, step: int, compute, is_main: bool = True):
    """(train logps, held-out logps, meta, computed). `compute()` -> (train, heldout, forwards) runs
    only when RUN_DIR holds no complete reference and the run is at step 0."""
    cached = read_cached(run_dir, digest, step)
    if cached is not None:
        return (*cached, False)
    npy, meta_path = Path(run_dir) / REFERENCE_FILE, Path(run_dir) / REFERENCE_META
    train, heldout, forwards = compute()
    meta = {"pairs": len(train) + len(heldout), "train_pairs": len(train), "heldout_pairs": len(heldout),
            "forwards": forwards, "computed_at_step": 0, "digest": digest}
    if is_main:
        _write(npy, lambda f: np.save(f, np.concatenate([train, heldout]).astype(np.float32)))
        _write(meta_path, lambda f: f.write(json.dumps(meta, indent=1).encode()))
    return train, heldout, meta, True


def _write(path: Path, write) -> None:
    """Write under a temporary name, fsync, rename into place. Not folders.replace_file: `write`
    streams into the open file (arrays too large to hold twice) and the data is fsynced."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)

"""Token shards on disk (numpy memmap) and their index of document boundaries.

One shard per domain and split: `shards/<domain>/<split>.bin` holds the token ids of every document,
each followed by EOS, as raw little-endian uint16 (vocabulary below 65,536) or uint32. Beside it:
  `<split>.idx.npz`   doc_offsets (int64, documents + 1: document i is tokens [off[i], off[i+1])),
                      doc_bytes (int64, UTF-8 bytes of each cleaned document), doc_source (int32,
                      index into the domain's `sources` list in manifest.json)
  `<split>.ids.txt`   the document ids, one a line, in shard order
Files are written under temporary names and renamed when complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from glassroom.errors import GlassroomError

SPLITS = ("train", "validation")


def shard_paths(root: Path, domain: str, split: str) -> dict[str, Path]:
    folder = Path(root) / "shards" / domain
    return {
        "tokens": folder / f"{split}.bin",
        "index": folder / f"{split}.idx.npz",
        "ids": folder / f"{split}.ids.txt",
    }


class ShardWriter:
    """Appends encoded documents to one shard; `close()` writes the index and renames into place."""

    def __init__(self, root: Path, domain: str, split: str, dtype: np.dtype) -> None:
        self.paths = shard_paths(root, domain, split)
        self.paths["tokens"].parent.mkdir(parents=True, exist_ok=True)
        self.dtype = np.dtype(dtype)
        self.tmp = {k: p.with_name(p.name + ".tmp") for k, p in self.paths.items()}
        self.tokens_file = open(self.tmp["tokens"], "wb")
        self.ids_file = open(self.tmp["ids"], "w", encoding="utf-8")
        self.offsets = [np.zeros(1, dtype=np.int64)]
        self.doc_bytes: list[int] = []
        self.doc_source: list[int] = []
        self.n_tokens = 0

    def add(self, ids: np.ndarray, offsets: np.ndarray, docs: list[dict], source_index: dict[str, int]) -> None:
        """Append a batch from tokenizer.encode_documents with the documents it encodes."""
        self.tokens_file.write(ids.astype(self.dtype, copy=False).tobytes())
        self.offsets.append(offsets[1:] + self.n_tokens)
        self.n_tokens += int(offsets[-1])
        for doc in docs:
            self.doc_bytes.append(doc["bytes"])
            self.doc_source.append(source_index[doc["source"]])
            self.ids_file.write(doc["id"].replace("\n", " ") + "\n")

    def close(self) -> dict:
        """Finish the files; returns {documents, tokens, bytes} of the shard."""
        self.tokens_file.close()
        self.ids_file.close()
        offsets = np.concatenate(self.offsets)
        with open(self.tmp["index"], "wb") as fh:
            np.savez(fh, doc_offsets=offsets, doc_bytes=np.asarray(self.doc_bytes, dtype=np.int64),
                     doc_source=np.asarray(self.doc_source, dtype=np.int32))
        for key, path in self.paths.items():
            os.replace(self.tmp[key], path)
        return {"documents": len(self.doc_bytes), "tokens": self.n_tokens, "bytes": int(sum(self.doc_bytes))}


class Shard:
    """Read access to one domain/split: tokens as a memmap, the index, document ids and text."""

    def __init__(self, root: Path, domain: str, split: str, dtype: str | np.dtype) -> None:
        self.paths = shard_paths(root, domain, split)
        for key in ("tokens", "index"):
            if not self.paths[key].is_file():
                raise GlassroomError(f"{self.paths[key]}: missing; rebuild the dataset with glassroom data build")
        self.domain, self.split = domain, split
        self.dtype = np.dtype(dtype)
        size = self.paths["tokens"].stat().st_size
        if size % self.dtype.itemsize:
            raise GlassroomError(f"{self.paths['tokens']}: size {size} is not a whole number of {self.dtype} tokens (corrupt shard)")
        self.tokens = np.memmap(self.paths["tokens"], dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)
        with np.load(self.paths["index"]) as index:
            self.doc_offsets = index["doc_offsets"]
            self.doc_bytes = index["doc_bytes"]
            self.doc_source = index["doc_source"]
        if int(self.doc_offsets[-1]) != len(self.tokens):
            raise GlassroomError(f"{self.paths['tokens']}: index says {int(self.doc_offsets[-1])} tokens, file has {len(self.tokens)} (corrupt shard)")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_docs(self) -> int:
        return len(self.doc_bytes)

    @property
    def n_bytes(self) -> int:
        return int(self.doc_bytes.sum())

    def doc_ids(self) -> list[str]:
        return self.paths["ids"].read_text(encoding="utf-8").splitlines()

    def doc_tokens(self, i: int) -> np.ndarray:
        """Token ids of document i without its trailing EOS."""
        return np.asarray(self.tokens[self.doc_offsets[i]: self.doc_offsets[i + 1] - 1])

    def bytes_between(self, start: int, stop: int) -> float:
        """UTF-8 bytes of text that tokens [start, stop) cover (documents cut pro rata by tokens)."""
        offs = self.doc_offsets
        first = int(np.searchsorted(offs, start, side="right")) - 1
        last = int(np.searchsorted(offs, stop, side="left"))
        total = 0.0
        for i in range(max(first, 0), min(last, self.n_docs)):
            lo, hi = int(offs[i]), int(offs[i + 1])
            overlap = min(hi, stop) - max(lo, start)
            if overlap > 0:
                total += self.doc_bytes[i] * overlap / (hi - lo)
        return total


def read_manifest(root: str | Path) -> dict:
    """manifest.json of a built dataset, with a clear error when the folder is not one."""
    path = Path(root) / "manifest.json"
    if not path.is_file():
        raise GlassroomError(f"{root}: not a built dataset (no manifest.json); run glassroom data build first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise GlassroomError(f"{path}: not valid JSON ({exc.msg}); rebuild the dataset") from None


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically: a temporary name, then a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)

"""Token shards on disk (numpy memmap) and their index of document boundaries.

One shard per domain and split: `shards/<domain>/<split>.bin` holds the token ids of every document,
each followed by EOS, as raw little-endian uint16 (vocabulary below 65,536) or uint32. Beside it:
  `<split>.idx.npz`   doc_offsets (int64, documents + 1: document i is tokens [off[i], off[i+1])),
                      doc_bytes (int64, UTF-8 bytes of each cleaned document), doc_source (int32,
                      index into the domain's `sources` list in manifest.json), and in datasets built
                      with the quality and decontamination stages: doc_quality (float32 classifier
                      score, NaN without quality), doc_bucket (int8 quality bucket, -1 without
                      quality), doc_flags (uint8; bit 1: flagged by decontamination). Documents are
                      ordered by bucket (q0 first), so each (domain, bucket) cell is one contiguous
                      range (manifest "cells").
  `<split>.ids.txt`   the document ids, one a line, in shard order
  `<split>.mask.bin`  conversation data only (manifest task sft/dpo): the loss mask, uint8, one byte
                      per token (glassroom/data/chat.py)
The .npz is written with fixed zip timestamps (`savez_fixed`), so two builds of the same recipe
give the same bytes. Files are written under temporary names and renamed when complete; the manifest records each
shard's token count and its largest token id (`max_token_id`).

Reading checks what a damaged or hand-edited dataset would get wrong, each as one line naming the
file: an index that is not a valid .npz or lacks a field, offsets that do not start at 0, go
backwards or end elsewhere than the .bin's length, a .bin that is not a whole number of tokens of
the manifest's dtype, and (`Shard.max_token_id`) token ids at or above the vocabulary: a full scan
of shards up to SCAN_FULL_TOKENS tokens; above that the id recorded at build time together with a
scan of SCAN_SAMPLES evenly spaced windows of SCAN_WINDOW tokens (the first and last included), so
a few flipped ids in a huge shard can slip through.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file

SPLITS = ("train", "validation")
SCAN_FULL_TOKENS = 64 * 2**20  # shards up to this many tokens are scanned whole for their largest id
SCAN_SAMPLES = 256  # windows scanned in bigger shards...
SCAN_WINDOW = 65536  # ...of this many tokens each
TOKEN_DTYPES = ("uint16", "uint32")


def shard_paths(root: Path, domain: str, split: str) -> dict[str, Path]:
    folder = Path(root) / "shards" / domain
    return {
        "tokens": folder / f"{split}.bin",
        "index": folder / f"{split}.idx.npz",
        "ids": folder / f"{split}.ids.txt",
    }


class ShardWriter:
    """Appends encoded documents to one shard; `close()` writes the index and renames into place."""

    def __init__(self, root: Path, domain: str, split: str, dtype: np.dtype, with_mask: bool = False) -> None:
        self.paths = shard_paths(root, domain, split)
        if with_mask:
            self.paths["mask"] = self.paths["tokens"].with_name(f"{split}.mask.bin")
        self.paths["tokens"].parent.mkdir(parents=True, exist_ok=True)
        self.dtype = np.dtype(dtype)
        self.tmp = {k: p.with_name(p.name + ".tmp") for k, p in self.paths.items()}
        self.tokens_file = open(self.tmp["tokens"], "wb")
        self.mask_file = open(self.tmp["mask"], "wb") if with_mask else None
        self.ids_file = open(self.tmp["ids"], "w", encoding="utf-8")
        self.offsets = [np.zeros(1, dtype=np.int64)]
        self.doc_bytes: list[int] = []
        self.doc_source: list[int] = []
        self.doc_quality: list[float] = []
        self.doc_bucket: list[int] = []
        self.doc_flags: list[int] = []
        self.n_tokens = 0
        self.max_token_id = -1

    def add(self, ids: np.ndarray, offsets: np.ndarray, docs: list[dict], source_index: dict[str, int],
            mask: np.ndarray | None = None) -> None:
        """Append a batch from tokenizer.encode_documents with the documents it encodes (and, for a
        writer made with_mask, the loss mask of those tokens). A document may carry "quality"
        (score), "bucket" and "flags"; absent ones are NaN, -1 and 0."""
        if (mask is None) != (self.mask_file is None) or (mask is not None and len(mask) != len(ids)):
            raise ValueError("a mask of the batch's length is given exactly when the writer is made with_mask")
        self.tokens_file.write(ids.astype(self.dtype, copy=False).tobytes())
        if mask is not None:
            self.mask_file.write(mask.astype(np.uint8, copy=False).tobytes())
        if len(ids):
            self.max_token_id = max(self.max_token_id, int(ids.max()))
        self.offsets.append(offsets[1:] + self.n_tokens)
        self.n_tokens += int(offsets[-1])
        for doc in docs:
            self.doc_bytes.append(doc["bytes"])
            self.doc_source.append(source_index[doc["source"]])
            self.doc_quality.append(doc.get("quality", float("nan")))
            self.doc_bucket.append(doc.get("bucket", -1))
            self.doc_flags.append(doc.get("flags", 0))
            self.ids_file.write(doc["id"].replace("\n", " ") + "\n")

    def close(self) -> dict:
        """Finish the files; returns {documents, tokens, bytes, max_token_id} of the shard."""
        self.tokens_file.close()
        self.ids_file.close()
        if self.mask_file is not None:
            self.mask_file.close()
        offsets = self.doc_offsets = np.concatenate(self.offsets)
        savez_fixed(self.tmp["index"], doc_offsets=offsets, doc_bytes=np.asarray(self.doc_bytes, dtype=np.int64),
                    doc_source=np.asarray(self.doc_source, dtype=np.int32),
                    doc_quality=np.asarray(self.doc_quality, dtype=np.float32),
                    doc_bucket=np.asarray(self.doc_bucket, dtype=np.int8),
                    doc_flags=np.asarray(self.doc_flags, dtype=np.uint8))
        for key, path in self.paths.items():   # files streamed to their temporary names (not folders.replace_file)
            os.replace(self.tmp[key], path)
        return {"documents": len(self.doc_bytes), "tokens": self.n_tokens, "bytes": int(sum(self.doc_bytes)),
                "max_token_id": self.max_token_id}


class Shard:
    """Read access to one domain/split: tokens as a memmap, the index, document ids and text.

    Opening checks the index against the token file (see the module doc); `recorded_max` is the
    largest token id the manifest recorded at build time, if any.
    """

    def __init__(self, root: Path, domain: str, split: str, dtype: str | np.dtype,
                 recorded_max: int | None = None) -> None:
        self.paths = shard_paths(root, domain, split)
        for key in ("tokens", "index"):
            if not self.paths[key].is_file():
                what = "missing" if not os.path.lexists(self.paths[key]) else "not a regular file (a folder, device, pipe or broken link)"
                raise GlassroomError(f"{self.paths[key]}: {what}; rebuild the dataset with glassroom data build")
        self.domain, self.split = domain, split
        self.dtype = np.dtype(dtype)
        self.recorded_max = recorded_max
        size = self.paths["tokens"].stat().st_size
        if size % self.dtype.itemsize:
            raise GlassroomError(f"{self.paths['tokens']}: size {size} is not a whole number of {self.dtype} tokens (corrupt shard); rebuild the dataset")
        self.tokens = np.memmap(self.paths["tokens"], dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)
        self.doc_offsets, self.doc_bytes, self.doc_source = _read_index(self.paths["index"], len(self.tokens))
        self.doc_quality, self.doc_bucket, self.doc_flags = _read_extras(self.paths["index"], self.n_docs)
        self._max_token: tuple[int, str] | None = None

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

    def max_token_id(self) -> tuple[int, str]:
        """(largest token id, how it was found) of this shard; -1 when it is empty. See the module doc."""
        if self._max_token is None:
            n = len(self.tokens)
            if n == 0:
                self._max_token = (-1, "empty")
            elif n <= SCAN_FULL_TOKENS:
                self._max_token = (_chunked_max(self.tokens, 0, n), "a full scan")
            else:
                starts = np.linspace(0, n - SCAN_WINDOW, SCAN_SAMPLES).astype(np.int64)
                found = max(int(np.max(self.tokens[s: s + SCAN_WINDOW])) for s in starts)
                if self.recorded_max is not None:
                    found = max(found, int(self.recorded_max))
                self._max_token = (found, "the id recorded at build time and a sampled scan")
        return self._max_token

    def check_token_ids(self, vocab_size: int, what: str) -> None:
        """A one-line error when a token id is at or above `vocab_size` (`what` names that limit)."""
        found, how = self.max_token_id()
        if found >= vocab_size:
            raise GlassroomError(
                f"{self.paths['tokens']}: holds token id {found}, at or above {what} ({vocab_size}; found by "
                f"{how}); the shard is corrupt or from another tokenizer: rebuild the dataset"
            )

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


def _chunked_max(tokens: np.ndarray, start: int, stop: int, chunk: int = 1 << 24) -> int:
    return max(int(np.max(tokens[i: min(i + chunk, stop)])) for i in range(start, stop, chunk))


def _read_index(path: Path, n_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(doc_offsets, doc_bytes, doc_source) of an index file, checked against a shard of n_tokens."""
    def corrupt(what: str) -> GlassroomError:
        return GlassroomError(f"{path}: {what} (corrupt shard index); rebuild the dataset")

    try:
        index = np.load(path, allow_pickle=False)
        if not isinstance(index, np.lib.npyio.NpzFile):
            raise corrupt("not an .npz archive")
        with index:
            missing = [k for k in ("doc_offsets", "doc_bytes", "doc_source") if k not in index.files]
            if missing:
                raise corrupt(f"lacks {', '.join(missing)}")
            offsets, doc_bytes, doc_source = index["doc_offsets"], index["doc_bytes"], index["doc_source"]
    except GlassroomError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, TypeError) as exc:
        raise corrupt(f"cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'truncated'})") from None
    for name, arr in (("doc_offsets", offsets), ("doc_bytes", doc_bytes), ("doc_source", doc_source)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise corrupt(f"{name} is not a list of whole numbers ({arr.dtype}, {arr.ndim}-D)")
    if len(offsets) < 1 or int(offsets[0]) != 0:
        raise corrupt("doc_offsets does not start at 0")
    if len(offsets) > 1 and bool((np.diff(offsets) < 0).any()):
        raise corrupt("doc_offsets go backwards")
    if int(offsets[-1]) != n_tokens:
        raise corrupt(f"doc_offsets end at token {int(offsets[-1])}, the .bin holds {n_tokens} tokens")
    docs = len(offsets) - 1
    if len(doc_bytes) != docs or len(doc_source) != docs:
        raise corrupt(f"{docs} documents in doc_offsets, {len(doc_bytes)} in doc_bytes, {len(doc_source)} in doc_source")
    if docs and (int(doc_bytes.min()) < 0 or int(doc_source.min()) < 0):
        raise corrupt("negative doc_bytes or doc_source")
    return offsets.astype(np.int64, copy=False), doc_bytes.astype(np.int64, copy=False), doc_source


def _read_extras(path: Path, docs: int) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """doc_quality, doc_bucket, doc_flags of an index (each None when absent: datasets built before the
    quality and decontamination stages); a present one of the wrong length or type is a one-line error naming the file."""
    out = []
    with np.load(path, allow_pickle=False) as index:
        for name, kind in (("doc_quality", np.floating), ("doc_bucket", np.integer), ("doc_flags", np.integer)):
            if name not in index.files:
                out.append(None)
                continue
            try:
                arr = index[name]
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
                raise GlassroomError(f"{path}: {name} cannot be read ({type(exc).__name__}) (corrupt shard index); "
                                     "rebuild the dataset") from None
            if arr.ndim != 1 or len(arr) != docs or not np.issubdtype(arr.dtype, kind):
                raise GlassroomError(f"{path}: {name} does not hold one {kind.__name__} per document ({len(arr)} for "
                                     f"{docs}) (corrupt shard index); rebuild the dataset")
            out.append(arr)
    return tuple(out)


def savez_fixed(path, **arrays: np.ndarray) -> None:
    """np.savez with fixed zip entry timestamps and order, so equal arrays give equal bytes; `path` is a
    file path or a binary file object."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o600 << 16
            zf.writestr(info, buf.getvalue())


def check_manifest(manifest, path: Path) -> None:
    """A one-line error naming manifest.json when the fields a reader needs are absent or malformed."""
    def bad(what: str) -> GlassroomError:
        return GlassroomError(f"{path}: {what}; rebuild the dataset with glassroom data build")

    if not isinstance(manifest, dict):
        raise bad("not a JSON object")
    if manifest.get("dtype") not in TOKEN_DTYPES:
        raise bad(f"dtype is {manifest.get('dtype')!r}, expected one of {', '.join(TOKEN_DTYPES)}")
    tok = manifest.get("tokenizer")
    if not isinstance(tok, dict) or not all(isinstance(tok.get(k), int) and not isinstance(tok.get(k), bool)
                                            for k in ("vocab_size", "eos_id")):
        raise bad("tokenizer.vocab_size and tokenizer.eos_id must be whole numbers")
    if tok["vocab_size"] < 1 or not 0 <= tok["eos_id"] < tok["vocab_size"]:
        raise bad(f"tokenizer.vocab_size {tok['vocab_size']} and eos_id {tok['eos_id']} are impossible")
    if tok["vocab_size"] > np.iinfo(np.dtype(manifest["dtype"])).max + 1:
        raise bad(f"tokenizer.vocab_size {tok['vocab_size']} does not fit dtype {manifest['dtype']}")
    domains = manifest.get("domains")
    if not isinstance(domains, dict) or not domains:
        raise bad("domains is missing or empty")
    for name, entry in domains.items():
        if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name:
            raise bad(f"domain name {name!r} is not a plain folder name")
        for split in SPLITS:
            info = entry.get(split) if isinstance(entry, dict) else None
            tokens = info.get("tokens") if isinstance(info, dict) else None
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
                raise bad(f"domains.{name}.{split}.tokens is missing or not a whole number")


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
    replace_file(path, json.dumps(data, indent=2, sort_keys=False) + "\n")

"""Fast document encoding: a tiktoken mirror of a byte-level BPE, checked against `tokenizers`.

`tokenizers`' encode_batch spends most of its time outside the BPE merges (offsets, normalisation
plumbing, Python objects per encoding). For the shape of tokenizer a build trains (byte-level BPE,
GPT-2 pre-tokenizer regex, no normalizer, only special added tokens) the same ids come from a
`tiktoken.Encoding` whose mergeable ranks are the BPE's merge order: rank 0-255 are the single bytes
(the byte-level alphabet decoded back to bytes), rank 256+i the result of merge i, and a table maps
ranks back to the tokenizer's ids. Special tokens (EOS) are never matched in text: encode_ordinary.

`mirror(tok)` returns a `Mirror` or the reason it cannot (a normalizer, another pre-tokenizer, a
non-BPE model, dropout, non-special added tokens, ...). tiktoken merges any adjacent pair whose
concatenation is a token, where `tokenizers` merges only listed pairs, so a mirror is only trusted
after `check` has compared it with `tokenizers` on a sample of the build's documents; a mismatch
means the build falls back to `tokenizers` (said in the log and in manifest["tokenizer"]["encoder"]).

`encode_batch(spec, texts, dtype)` is the top-level, picklable task the executors run: `spec` is
("tiktoken" | "tokenizers", tokenizer.json text); the encoder is built once per process and cached.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from glassroom.data.tokenizer import EOS_TOKEN

# The pattern `tokenizers` ByteLevel(use_regex=True) splits with (GPT-2's), in tiktoken's regex syntax.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_CACHE: dict[str, object] = {}


def _byte_decoder() -> dict[str, int]:
    """The byte-level alphabet (GPT-2's bytes_to_unicode), inverted: character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Mirror:
    """A tiktoken Encoding giving a byte-level BPE tokenizer's ids (rank -> id through `ids`)."""

    def __init__(self, enc, ids: np.ndarray) -> None:
        self.enc, self.ids = enc, ids

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        return [self.ids[np.asarray(r, dtype=np.int64)] if r else np.zeros(0, np.int64)
                for r in self.enc.encode_ordinary_batch(texts, num_threads=1)]


def mirror(tok) -> tuple[Mirror | None, str]:
    """(Mirror, "") when `tok` has the shape tiktoken can reproduce, else (None, why not)."""
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed"
    spec = json.loads(tok.to_str())
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE":
        return None, f"the model is {model.get('type')}, not BPE"
    if spec.get("normalizer") is not None:
        return None, "the tokenizer has a normalizer"
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return None, "the pre-tokenizer is not ByteLevel(add_prefix_space=False, use_regex=True)"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return None, f"the BPE model sets {key}"
    if model.get("byte_fallback") or model.get("ignore_merges"):
        return None, "the BPE model sets byte_fallback or ignore_merges"
    if any(not t.get("special") for t in spec.get("added_tokens") or []):
        return None, "the tokenizer has non-special added tokens (matched inside text)"
    decoder = _byte_decoder()
    vocab: dict[str, int] = model.get("vocab") or {}

    def to_bytes(s: str) -> bytes | None:
        try:
            return bytes(decoder[c] for c in s)
        except KeyError:
            return None

    ranks: dict[bytes, int] = {}
    rank_ids: list[int] = [0] * 256
    for ch, b in decoder.items():
        if ch not in vocab:
            return None, f"the vocabulary lacks the byte symbol {ch!r}"
        ranks[bytes([b])] = b
        rank_ids[b] = vocab[ch]
    for merge in model.get("merges") or []:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        merged = a + b
        data = to_bytes(merged)
        if data is None or merged not in vocab or data in ranks:
            return None, f"merge {a!r} + {b!r} does not give one new byte-level token"
        ranks[data] = len(rank_ids)
        rank_ids.append(vocab[merged])
    try:
        enc = tiktoken.Encoding(name="glassroom-mirror", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    except Exception as exc:  # tiktoken refuses inconsistent ranks with a bare exception
        return None, f"tiktoken refused the ranks ({str(exc)[:80]})"
    return Mirror(enc, np.asarray(rank_ids, dtype=np.int64)), ""


def check(m: Mirror, tok, texts: list[str]) -> str:
    """"" when the mirror gives `tokenizers`' ids on every text, else which document differed."""
    tok.encode_special_tokens = True
    want = tok.encode_batch_fast(texts, add_special_tokens=False)
    for i, (got, exp) in enumerate(zip(m.encode(texts), want)):
        if not np.array_equal(got, np.asarray(exp.ids, dtype=np.int64)):
            return f"document {i} of the {len(texts)} checked encodes differently"
    return ""


def _encoder(kind: str, tok_json: str):
    key = kind + ":" + hashlib.sha256(tok_json.encode()).hexdigest()
    enc = _CACHE.get(key)
    if enc is None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(tok_json)
        tok.encode_special_tokens = True
        if kind == "tiktoken":
            enc, why = mirror(tok)
            if enc is None:
                raise RuntimeError(f"the tokenizer cannot be mirrored in this process: {why}")
        else:
            enc = tok

        _CACHE.clear()  # one build's tokenizer at a time
        _CACHE[key] = enc = (enc, tok.token_to_id(EOS_TOKEN))
    return enc


def encode_batch(spec: tuple[str, str], texts: list[str], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of `texts` concatenated, each followed by EOS (id from the tokenizer), and the
    document token offsets (len(texts) + 1). Top-level and picklable: an executor task."""
    kind, tok_json = spec
    enc, eos = _encoder(kind, tok_json)
    if kind == "tiktoken":
        parts = enc.encode(texts)
    else:
        parts = [e.ids for e in enc.encode_batch_fast(texts, add_special_tokens=False)]
    lengths = np.fromiter((len(p) + 1 for p in parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.dtype(dtype))
    for start, p in zip(offsets[:-1], parts):
        ids[start: start + len(p)] = p
        ids[start + len(p)] = eos
    return ids, offsets

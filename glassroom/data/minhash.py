"""MinHash signatures of word shingles for near-duplicate removal (glassroom/data/dedup.py bands them).

`Signer(num_perm, shingle_words).signatures(texts)` signs a batch of documents in one numpy pass; the
algorithm and why it is a valid MinHash are in docs/data-dedup.md, "The signatures".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from glassroom.data.ngrams import batch_ngram_hashes, ngram_hashes, words_of


class Signer:
    """MinHash signatures of word shingles, a batch of documents at a time, all in numpy.

    A shingle (`shingle_words` lowercased `\\w+` words; a text of fewer words is one shingle of them
    all) is hashed to 64 bits by glassroom/data/ngrams.py (a polynomial of its words' hashes, mixed by
    splitmix64: deterministic in every process and on every machine). Slot i of a signature is the
    minimum over the document's shingle hashes x of (a_i * x + b_i) mod 2^64, with a_i odd, so each
    slot's function is a bijection of the 64-bit hashes: the smallest value falls on a uniformly
    chosen shingle of the set, and two documents agree in a slot with probability their Jaccard. The
    (a_i, b_i) are splitmix64 values of the seed and slot number (`slot_constants`), the same
    everywhere. A text without words has every slot at 2^64 - 1 (`EMPTY`).
    """

    EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
    CHUNK = 1 << 15  # shingle hashes permuted at a time (fits in a core's cache)
    GROUP_CHARS = 1 << 20  # characters of text hashed at a time

    def __init__(self, num_perm: int, shingle_words: int, seed: int = 1) -> None:
        self.num_perm = int(num_perm)
        self.k = int(shingle_words)
        self.a, self.b = slot_constants(self.num_perm, seed)

    def signature(self, text: str) -> np.ndarray:
        """(num_perm,) uint64: the signature of one text."""
        return self.signatures([text])[0]

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), num_perm) uint64: one signature per text, the same as `signature` text by text."""
        out = np.full((len(texts), self.num_perm), self.EMPTY, dtype=np.uint64)
        start, chars = 0, 0
        for end, text in enumerate(texts, 1):
            chars += len(text)
            if chars >= self.GROUP_CHARS or end == len(texts):
                self._sign(texts[start:end], out[start:end])
                start, chars = end, 0
        return out

    def _sign(self, texts: Sequence[str], out: np.ndarray) -> None:
        hashes, doc = batch_ngram_hashes(texts, self.k)
        # Texts of 1 to k-1 words have no k-word window: their one shingle is all their words.
        short = np.ones(len(texts), dtype=bool)
        short[doc] = False
        for d in np.flatnonzero(short):
            w = len(words_of(texts[d]))
            if w:
                out[d] = self.permuted(ngram_hashes(texts[d], w)).min(axis=0)
        a, b = self.a, self.b
        part_buf = np.empty((0, self.num_perm), dtype=np.uint64)
        v_buf = np.empty(min(self.CHUNK, len(hashes)), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for s in range(0, len(hashes), self.CHUNK):
                x, d = hashes[s: s + self.CHUNK], doc[s: s + self.CHUNK]
                starts = np.flatnonzero(np.concatenate(([True], d[1:] != d[:-1])))
                rows = d[starts]
                if len(part_buf) < len(rows):
                    part_buf = np.empty((len(rows), self.num_perm), dtype=np.uint64)
                part, v = part_buf[: len(rows)], v_buf[: len(x)]
                for i in range(self.num_perm):
                    np.multiply(x, a[i], out=v)
                    np.add(v, b[i], out=v)
                    part[:, i] = np.minimum.reduceat(v, starts)
                # a document cut by the chunk edge takes the smaller value of its two parts
                out[rows] = np.minimum(out[rows], part)

    def permuted(self, hashes: np.ndarray) -> np.ndarray:
        """(len(hashes), num_perm) uint64: every slot's function of every shingle hash (a_i * x + b_i mod 2^64)."""
        with np.errstate(over="ignore"):
            return np.asarray(hashes, dtype=np.uint64)[:, None] * self.a[None, :] + self.b[None, :]


def slot_constants(num_perm: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), each (num_perm,) uint64, a odd: value k is splitmix64's mixer of (seed * 2^32 + k + 1) times
    its golden-ratio constant, in plain integers (the same on every machine and numpy version; another
    seed gives unrelated values)."""
    mask = (1 << 64) - 1
    values = []
    for k in range(2 * int(num_perm)):
        z = (((int(seed) << 32) + k + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        values.append(z ^ (z >> 31))
    a = np.asarray(values[0::2], dtype=np.uint64) | np.uint64(1)
    b = np.asarray(values[1::2], dtype=np.uint64)
    return a, b

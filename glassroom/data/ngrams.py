"""N-gram hashing and the Bloom filter under decontamination (glassroom/data/decontam.py uses them).

Words are lowercased `\\w+` runs, the words the dedup shingles count.
- `ngram_hashes(text, n)`: a 64-bit hash of every n-word window, all in numpy (no Python loop per word): the
  text's code points are classified \\w or not by a table built from `re` itself, each word is hashed as a
  polynomial of its code points mod 2^64 (prefix sums), the n word hashes of a window are combined by a
  second polynomial in n array steps, each finished with the splitmix64 mixer. Deterministic across
  processes and machines (no Python hash()). `batch_ngram_hashes` does a whole batch in one pass.
- `BloomFilter`: a numpy bit array sized from the expected items and a false-positive rate; k positions by
  double hashing of the 64-bit hash; vectorised add/contains; to_bytes/from_bytes.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Sequence

import numpy as np

WORDS = re.compile(r"\w+")  # the dedup shingles' words (glassroom/data/clean.py), lowercased before matching
FP_RATE = 0.001  # the Bloom filter's target false-positive rate

_U64 = np.uint64
_MUL = _U64(0x9E3779B97F4A7C15)  # the n-gram polynomial's base (odd)
_CHAR = 0x100000001B3  # the word polynomial's base over code points (odd, so invertible mod 2^64)
_CHAR_INV = pow(_CHAR, -1, 1 << 64)
PIECE = 1 << 20  # characters hashed at once (bounds the powers tables: 16 MB)
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_TABLE: np.ndarray | None = None  # bool per code point: a \w character (built from `re` itself, once per process)
_POWERS: list[np.ndarray] = []  # [_CHAR^j, _CHAR^-j for j < the longest piece seen]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on a uint64 array (wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _U64(30))
        x = x * _M1
        x = x ^ (x >> _U64(27))
        x = x * _M2
        return x ^ (x >> _U64(31))


def words_of(text: str) -> list[str]:
    """The lowercased \\w+ words of text."""
    return WORDS.findall(text.lower())


def _word_table() -> np.ndarray:
    global _TABLE
    if _TABLE is None:
        every = "".join(map(chr, range(0x110000)))
        _TABLE = np.frombuffer(re.sub(r"\W", "\0", every).encode("utf-32-le", "surrogatepass"), dtype=np.uint32) != 0
    return _TABLE


def _powers(count: int) -> tuple[np.ndarray, np.ndarray]:
    """_CHAR^j and _CHAR^-j mod 2^64 for j < count (cached, grown by doubling; count is at most a piece's length)."""
    have = len(_POWERS[0]) if _POWERS else 0
    if have < count:
        size = max(count, 2 * have, 1 << 16)
        up = np.full(size, _CHAR, dtype=np.uint64)
        down = np.full(size, _CHAR_INV, dtype=np.uint64)
        up[0] = down[0] = 1
        _POWERS[:] = [np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64)]
    return _POWERS[0], _POWERS[1]


def _hash_piece(cp: np.ndarray, isw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    edge = np.diff(isw.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    up, down = _powers(len(cp) + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(cp) + 1, dtype=np.uint64)
        np.cumsum(cp.astype(np.uint64) * up[: len(cp)], out=prefix[1:])
        h = (prefix[ends] - prefix[starts]) * down[starts] + (ends - starts).astype(np.uint64) * _M2
    return _mix(h), starts


def _words_hashed(lowered: str) -> tuple[np.ndarray, np.ndarray]:
    """(hash, first character) of every \\w+ word of an already lowercased string, all in numpy: a word's hash
    is the polynomial sum of cp[i] * C^i over its code points (i from 0 at its first character: prefix sums
    of cp[j] * C^j, shifted by C^-start) plus its length, mixed. Equal words hash equal wherever they stand.
    A long text is hashed in pieces of about PIECE characters cut after a non-word character, so memory
    (the powers tables) stays bounded by the piece, not the text."""
    cp = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    isw = _word_table()[cp]
    if len(cp) <= PIECE:
        return _hash_piece(cp, isw)
    hashes, starts = [], []
    at = 0
    while at < len(cp):
        end = min(at + PIECE, len(cp))
        if end < len(cp):
            breaks = np.flatnonzero(~isw[at:end])
            if len(breaks):
                end = at + int(breaks[-1]) + 1
            else:  # one word longer than a piece: take it whole
                after = np.flatnonzero(~isw[end:])
                end = end + int(after[0]) if len(after) else len(cp)
        h, s = _hash_piece(cp[at:end], isw[at:end])
        hashes.append(h)
        starts.append(s + at)
        at = end
    return np.concatenate(hashes), np.concatenate(starts)


def _windows(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of each n-word window (window j: words j..j+n-1): a polynomial in n array steps, mixed."""
    m = len(word_hashes) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    acc = word_hashes[:m].copy()
    with np.errstate(over="ignore"):
        for j in range(1, n):
            acc *= _MUL
            acc += word_hashes[j: j + m]
    return _mix(acc)


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """uint64 hashes of every n-word window of text, in order (repeats kept); empty when text has fewer than n words."""
    return _windows(_words_hashed(text.lower())[0], n)


def batch_ngram_hashes(texts: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, document) of every n-word window of every text, computed over the texts joined by NUL (not a
    word character) and dropping windows that cross from one text to the next: the same hashes as
    ngram_hashes(text, n) text by text, in far fewer numpy calls for short documents."""
    if not texts:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    lowered = [t.lower() for t in texts]
    first_char = np.cumsum([0] + [len(t) + 1 for t in lowered[:-1]])
    words, starts = _words_hashed("\0".join(lowered))
    m = len(words) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    doc = np.searchsorted(first_char, starts, side="right") - 1
    keep = doc[: m] == doc[n - 1:]
    return _windows(words, n)[keep], doc[: m][keep]


def _blocked_fp_rate(items: int, blocks: int, hashes: int) -> float:
    """False-positive rate of a blocked Bloom filter (64-bit blocks, `hashes` uniform bit picks per item): the
    block loads are Poisson(items/blocks); with x items a block has each bit set with 1 - (63/64)^(k x)."""
    if not items:
        return 0.0
    lam = items / blocks
    total, x, p = 0.0, 0, math.exp(-lam)
    while x < 10 * lam + 50:
        total += p * (1 - (63 / 64) ** (hashes * x)) ** hashes
        x += 1
        p *= lam / x
    return total


class BloomFilter:
    """A blocked Bloom filter of uint64 items: `blocks` 64-bit words; an item picks one word (multiply-shift of
    its high 32 bits) and `hashes` bits inside it (6-bit fields of a second, mixed hash), so a lookup is one
    gather and one compare, whatever k is. Sized by `sized` to meet the false-positive rate for its items."""

    MAX_HASHES = 8  # 6-bit fields of one 64-bit hash (8: the fastest lookup at 0.1% measured)
    MARGIN = 0.75  # the Poisson model underestimates a blocked filter's rate a little (bits set in a block correlate)

    def __init__(self, blocks: int, hashes: int, data: np.ndarray | None = None, items: int = 0) -> None:
        self.blocks = int(blocks)
        self.hashes = int(hashes)
        self.items = int(items)
        self.data = np.zeros(self.blocks, dtype=np.uint64) if data is None else data
        if len(self.data) != self.blocks or not 1 <= self.blocks < 1 << 32 or not 1 <= self.hashes <= self.MAX_HASHES:
            raise ValueError("BloomFilter: inconsistent size")

    @classmethod
    def sized(cls, expected_items: int, fp_rate: float = FP_RATE) -> "BloomFilter":
        """The smallest filter (in 5% steps from the classic m = -n ln p / (ln 2)^2 bits) whose blocked
        false-positive rate for expected_items is at most fp_rate; k = m/n ln 2, at most MAX_HASHES."""
        n = max(int(expected_items), 1)
        bits = max(64.0, -n * math.log(fp_rate) / math.log(2) ** 2)
        hashes = min(cls.MAX_HASHES, max(1, round(bits / n * math.log(2))))
        while _blocked_fp_rate(n, math.ceil(bits / 64), hashes) > fp_rate * cls.MARGIN:
            bits *= 1.05
        return cls(math.ceil(bits / 64), hashes)

    @property
    def bits(self) -> int:
        return 64 * self.blocks

    def _locate(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(block index, bit mask) per item."""
        with np.errstate(over="ignore"):
            folded = (items >> _U64(32)) ^ (items & _U64(0xFFFFFFFF))  # all 64 bits choose the block
            block = ((folded * _U64(self.blocks)) >> _U64(32)).astype(np.int64)
            fields = (_mix(items ^ _U64(0x5851F42D4C957F2D))[:, None] >> self._shifts()) & _U64(63)
            mask = np.bitwise_or.reduce(_U64(1) << fields, axis=1)
        return block, mask

    def _shifts(self) -> np.ndarray:
        return (6 * np.arange(self.hashes, dtype=np.uint64))[None, :]

    def add(self, items: np.ndarray) -> None:
        items = np.unique(np.asarray(items, dtype=np.uint64))
        for at in range(0, len(items), 1 << 18):
            block, mask = self._locate(items[at: at + (1 << 18)])
            np.bitwise_or.at(self.data, block, mask)
        self.items += len(items)

    def contains(self, items: np.ndarray) -> np.ndarray:
        """bool per item: True when all its bits are set (maybe in the set), False when surely not."""
        items = np.asarray(items, dtype=np.uint64)
        out = np.zeros(len(items), dtype=bool)
        for at in range(0, len(items), 1 << 18):  # bounded memory: k fields per item
            block, mask = self._locate(items[at: at + (1 << 18)])
            out[at: at + len(mask)] = (self.data[block] & mask) == mask
        return out

    def expected_fp_rate(self) -> float:
        return _blocked_fp_rate(self.items, self.blocks, self.hashes)

    def describe(self) -> dict:
        return {"kind": "blocked (64-bit blocks)", "bits": self.bits, "bytes": 8 * self.blocks, "hashes": self.hashes,
                "items": self.items, "fp_rate_target": FP_RATE, "fp_rate_expected": round(self.expected_fp_rate(), 8)}

    def to_bytes(self) -> bytes:
        return struct.pack("<QII", self.blocks, self.hashes, 0) + struct.pack("<Q", self.items) + \
            self.data.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, blob: bytes) -> "BloomFilter":
        blocks, hashes, _ = struct.unpack_from("<QII", blob, 0)
        (items,) = struct.unpack_from("<Q", blob, 16)
        data = np.frombuffer(blob, dtype="<u8", offset=24).astype(np.uint64, copy=False)
        return cls(blocks, hashes, data, items)

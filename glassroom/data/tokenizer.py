"""Train or load a byte-level BPE tokenizer (Hugging Face `tokenizers`); fast batch encoding.

Byte-level BPE reads any UTF-8 text without unknown tokens: the 256 byte symbols are always in the
vocabulary. One special token, `<|endoftext|>` (id 0), separates documents in the shards; only the
builder inserts it. Text inside a document that spells a special token (`<|endoftext|>` in a
tokenizer tutorial) is encoded as ordinary text: `encode_special_tokens = True` makes the tokenizer
skip its special-token matching (the flag is not saved in tokenizer.json, so every encoding path
sets it). Encoding uses `encode_batch_fast` (Rust threads, no character offsets computed), which
gives the same ids as `encode_batch`. The build writes shards with glassroom/data/fast_tokens.py: a
tiktoken mirror of this BPE, checked against it at build time, with these functions as the fallback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file

EOS_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """A byte-level BPE trained on `texts` with `vocab_size` entries, EOS first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.encode_special_tokens = True
    return tok


def load_tokenizer(path: str | Path):
    """A tokenizer.json; it must contain the `<|endoftext|>` token that separates documents."""
    from tokenizers import Tokenizer

    path = Path(os.path.expanduser(str(path)))
    if path.is_dir():
        raise GlassroomError(f"tokenizer {path}: is a folder; give the tokenizer.json file"
                             + (f" inside it ({path / 'tokenizer.json'})" if (path / "tokenizer.json").is_file() else ""))
    if not path.is_file():
        raise GlassroomError(f"tokenizer {path}: no such file")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise GlassroomError(f"tokenizer {path}: not a valid tokenizer.json ({str(exc)[:120]})") from None
    if tok.token_to_id(EOS_TOKEN) is None:
        raise GlassroomError(f"tokenizer {path}: has no {EOS_TOKEN} token to separate documents")
    tok.encode_special_tokens = True  # special-token text in a document is ordinary text
    return tok


def eos_id(tok) -> int:
    return tok.token_to_id(EOS_TOKEN)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocabulary below 65,536), else uint32."""
    return np.dtype(np.uint16 if vocab_size < 65536 else np.uint32)


def save_tokenizer(tok, path: Path) -> None:
    """Write tokenizer.json atomically. Not folders.replace_file: the tokenizers library writes the
    file itself (tok.save), so the temporary file is its path."""
    tmp = path.with_name(path.name + ".tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)


def copy_tokenizer(src: str | Path, dest: Path) -> None:
    replace_file(dest, Path(os.path.expanduser(str(src))).read_bytes())


def encode_documents(tok, texts: list[str], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of `texts` concatenated, each followed by EOS, and the document token offsets.

    Returns (ids, offsets) with len(offsets) == len(texts) + 1; document i is ids[offsets[i]:offsets[i+1]],
    its last token EOS. The text of a special token inside a document is encoded as ordinary text, so
    the only EOS ids are the ones added here.
    """
    tok.encode_special_tokens = True
    encodings = tok.encode_batch_fast(texts, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) + 1 for e in encodings), dtype=np.int64, count=len(encodings))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=dtype)
    eos = eos_id(tok)
    for start, enc in zip(offsets[:-1], encodings):
        n = len(enc.ids)
        ids[start: start + n] = enc.ids
        ids[start + n] = eos
    return ids, offsets


_ENCODERS: dict[int, object] = {}


def hf_encoder(tok):
    """A copy of a `tokenizers.Tokenizer` that matches special-token text, as `transformers` does."""
    key = id(tok)
    enc = _ENCODERS.get(key)
    if enc is None or enc[0] is not tok:
        from tokenizers import Tokenizer

        copy = Tokenizer.from_str(tok.to_str())
        copy.encode_special_tokens = False
        _ENCODERS[key] = enc = (tok, copy)
    return enc[1]


def encode(tok, text: str) -> list[int]:
    """Token ids of `text` as lm-eval's HFLM gets them from the exported tokenizer (special-token text
    matched, no special tokens added)."""
    return hf_encoder(tok).encode(text, add_special_tokens=False).ids

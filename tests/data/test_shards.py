"""Tests of glassroom/data/shards.py."""

from __future__ import annotations

import numpy as np
import pytest



def test_large_vocabularies_are_stored_as_uint32(tmp_path):
    from glassroom.data.shards import Shard, ShardWriter
    from glassroom.data.tokenizer import token_dtype

    assert token_dtype(65535) == np.uint16 and token_dtype(65536) == np.uint32
    writer = ShardWriter(tmp_path, "d", "train", token_dtype(100_000))
    ids = np.array([70_000, 5, 0, 99_999, 0], dtype=np.int64)
    writer.add(ids, np.array([0, 3, 5]), [{"id": "a", "source": "s", "bytes": 9}, {"id": "b", "source": "s", "bytes": 4}], {"s": 0})
    assert writer.close() == {"documents": 2, "tokens": 5, "bytes": 13, "max_token_id": 99_999}
    shard = Shard(tmp_path, "d", "train", "uint32")
    assert shard.tokens.tolist() == ids.tolist() and shard.doc_ids() == ["a", "b"]
    assert shard.doc_tokens(1).tolist() == [99_999]
    (tmp_path / "shards" / "d" / "train.bin").write_bytes(b"\x00" * 6)
    from glassroom.errors import GlassroomError
    with pytest.raises(GlassroomError, match="corrupt shard"):
        Shard(tmp_path, "d", "train", "uint32")


def test_shard_quality_arrays_are_optional_and_checked(tmp_path):
    """doc_quality/doc_bucket/doc_flags: written by ShardWriter, None in an index written before them,
    one line naming the file when present with the wrong length; the .npz bytes do not depend on time."""
    from glassroom.data.shards import Shard, ShardWriter
    from glassroom.errors import GlassroomError

    writer = ShardWriter(tmp_path, "d", "train", np.uint16)
    docs = [{"id": "a", "source": "s", "bytes": 9, "quality": 0.25, "bucket": 0},
            {"id": "b", "source": "s", "bytes": 4, "quality": 0.75, "bucket": 3, "flags": 1}]
    writer.add(np.array([7, 5, 0, 9, 0]), np.array([0, 3, 5]), docs, {"s": 0})
    writer.close()
    shard = Shard(tmp_path, "d", "train", "uint16")
    assert shard.doc_quality.tolist() == [0.25, 0.75] and shard.doc_bucket.tolist() == [0, 3]
    assert shard.doc_flags.tolist() == [0, 1] and shard.doc_quality.dtype == np.float32
    index = tmp_path / "shards" / "d" / "train.idx.npz"
    first = index.read_bytes()
    import time
    time.sleep(2.1)  # zip timestamps have 2-second resolution
    writer = ShardWriter(tmp_path, "d", "train", np.uint16)
    writer.add(np.array([7, 5, 0, 9, 0]), np.array([0, 3, 5]), docs, {"s": 0})
    writer.close()
    assert index.read_bytes() == first
    with np.load(index) as z:
        old = {k: z[k] for k in ("doc_offsets", "doc_bytes", "doc_source")}
    np.savez(index, **old)  # an index from before quality and decontamination: no doc_quality/bucket/flags
    shard = Shard(tmp_path, "d", "train", "uint16")
    assert shard.doc_quality is None and shard.doc_bucket is None and shard.doc_flags is None
    np.savez(index, **old, doc_bucket=np.zeros(3, dtype=np.int8))
    with pytest.raises(GlassroomError, match=r"train\.idx\.npz: doc_bucket does not hold one integer per document"):
        Shard(tmp_path, "d", "train", "uint16")

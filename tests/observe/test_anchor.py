"""A current chain extends a saved head (glassroom/observe/anchor.py): what each kind of change
since the copy is called."""

from __future__ import annotations

from glassroom.observe import anchor

SAVED = [[1, "a" * 64, "prediction", 0], [2, "b" * 64, "start", 0], [3, "c" * 64, "prediction", 3],
         [4, "d" * 64, "checkpoint", 4]]
HEAD = {"id": 4, "digest": "d" * 64, "kind": "checkpoint", "step": 4}


def test_an_extended_chain_extends_the_saved_head():
    assert anchor.extends(SAVED + [[5, "e" * 64, "end", 8]], HEAD, SAVED) is None
    assert anchor.extends(SAVED + [[5, "e" * 64, "end", 8]], HEAD) is None


def test_each_change_is_named():
    renumbered = [SAVED[0], SAVED[1], [3, "x" * 64, "checkpoint", 4]]
    assert "was prediction at step 3 in the saved copy and is checkpoint at step 4 now" in anchor.extends(renumbered, HEAD, SAVED)
    reworded = [SAVED[0], SAVED[1], [3, "x" * 64, "prediction", 3], [4, "y" * 64, "checkpoint", 4]]
    assert "event 3 (prediction at step 3) was rewritten" in anchor.extends(reworded, HEAD, SAVED)
    assert "cut back: it ends at event 2" in anchor.extends(SAVED[:2], HEAD, SAVED)
    swapped = [[1, "z" * 64, "prediction", 0], [2, "w" * 64, "start", 0], [3, "v" * 64, "checkpoint", 4],
               [4, "u" * 64, "checkpoint", 8]]
    assert anchor.extends(swapped, HEAD, SAVED).startswith("the record was replaced")
    assert "has another digest now" in anchor.extends(swapped, HEAD)   # a head alone (a feed entry)
    assert "of the saved copy was removed" in anchor.extends([SAVED[0], SAVED[1], SAVED[3]], HEAD, SAVED)


def test_a_private_note_lists_its_digest_only():
    rows = [(1, 1.0, 0, "note", '{"private": true}', "a" * 64), (2, 2.0, 5, "note", None, "b" * 64)]
    assert anchor.listing(rows) == [[1, "a" * 64, None, None], [2, "b" * 64, "note", 5]]
    assert anchor.head(rows[:1]) == {"id": 1, "digest": "a" * 64, "kind": None, "step": None, "time": 1.0}

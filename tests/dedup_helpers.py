"""Planted duplicates on real text for the dedup tests: distinct stdlib documents and copies of them
made at a chosen true shingle Jaccard (exact, whitespace, case and near copies)."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import replace

from data_helpers import STDLIB
from glassroom.data.clean import Signer
from glassroom.data.dedup import Deduplicator, jaccard, shingle_set, words
from glassroom.data.recipe import DedupConfig


def distinct_documents(n: int, min_words: int = 1000, k: int = 5) -> list[str]:
    """`n` real documents of `min_words` words or more (windows of stdlib modules), no two near copies."""
    docs = []
    for path in sorted(STDLIB.glob("*.py")) + sorted(STDLIB.glob("*/*.py")):
        lines, count = [], 0
        for line in path.read_text(errors="replace").split("\n"):
            lines.append(line)
            count += len(words(line))
            if count >= min_words:
                docs.append("\n".join(lines))
                lines, count = [], 0
                if len(docs) >= 3 * n:
                    break
        if len(docs) >= 3 * n:
            break
    # Drop any natural near copies (stdlib windows that share a licence or boilerplate).
    result = run(docs, DedupConfig(threshold=0.3), k=k)
    gone = {i for c in result.clusters for i in c}
    return [d for i, d in enumerate(docs) if i not in gone][:n]


def copy_at(text: str, target: float, rng: random.Random, k: int = 5, width: float = 0.01) -> str | None:
    """A copy of `text` whose true shingle Jaccard with it is in [target, target + width], or None.

    Words at random positions are replaced by new words (fewer or more until the Jaccard is in range).
    """
    original = shingle_set(text, k)
    spans = [m.span() for m in re.finditer(r"\w+", text)]
    order = list(range(len(spans)))
    rng.shuffle(order)

    def changed(count: int) -> str:
        chosen = sorted(order[:count])
        out, last = [], 0
        for j, pos in enumerate(chosen):
            a, b = spans[pos]
            out.append(text[last:a])
            out.append(f"zq{rng_tag}x{j}")
            last = b
        out.append(text[last:])
        return "".join(out)

    rng_tag = rng.randrange(10**9)
    lo, hi = 0, len(order)  # J(lo) >= target > J(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if jaccard(original, shingle_set(changed(mid), k)) >= target:
            lo = mid
        else:
            hi = mid
    copy = changed(lo)
    j = jaccard(original, shingle_set(copy, k))
    return copy if target <= j <= target + width else None


def whitespace_copy(text: str) -> str:
    return text.replace(" ", "  ").replace("\n", " \n\t")


def case_copy(text: str) -> str:
    return text.swapcase()


def run(texts: list[str], cfg: DedupConfig, k: int | None = None, order: list[int] | None = None):
    """The global pass over `texts` (build index = position), adding them in `order`."""
    cfg = replace(cfg, shingle_words=k) if k else cfg
    signer = Signer(cfg.num_perm, cfg.shingle_words)
    dd = Deduplicator(cfg)
    for i in (order if order is not None else range(len(texts))):
        dd.add(i, hashlib.blake2b(texts[i].encode(), digest_size=16).digest(),
               signer.signature(texts[i]) if cfg.fuzzy else None)
    result = dd.finish(lambda idx: [texts[i] for i in idx])
    result.dd = dd
    return result


def plant(base: list[str], levels: dict[str, float | str], per_level: int, seed: int = 0,
          threshold_width: float = 0.01) -> tuple[list[str], dict[int, tuple[str, int]]]:
    """`base` then copies of its documents: returns texts and {copy index: (level, original index)}.

    A level is 'exact', 'whitespace', 'case' or a Jaccard (copies in [J, J + 0.01]). Each copy comes
    from a different original, after all the originals, in a shuffled order.
    """
    rng = random.Random(seed)
    originals = list(range(len(base)))
    rng.shuffle(originals)
    made: list[tuple[str, str, int]] = []
    pick = iter(originals)
    for level, how in levels.items():
        count = 0
        while count < per_level:
            i = next(pick)
            if how == "exact":
                copy = base[i]
            elif how == "whitespace":
                copy = whitespace_copy(base[i])
            elif how == "case":
                copy = case_copy(base[i])
            else:
                copy = copy_at(base[i], how, rng, width=threshold_width)
                if copy is None:
                    continue
            made.append((level, copy, i))
            count += 1
    rng.shuffle(made)
    texts = list(base)
    planted = {}
    for level, copy, i in made:
        planted[len(texts)] = (level, i)
        texts.append(copy)
    return texts, planted

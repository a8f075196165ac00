"""Clustering for the atlas: spherical k-means (cosine on unit vectors), an optional fine-to-coarse merge,
class-based TF-IDF labels and a 2-D map. numpy, scipy and scikit-learn; deterministic for a seed."""

from __future__ import annotations

import numpy as np

CHUNK = 8_192   # rows per similarity block: bounds memory at CHUNK x k floats


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def nearest(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row: index of the most similar centroid and that cosine similarity."""
    best = np.empty(len(x), dtype=np.int64)
    sim = np.empty(len(x), dtype=np.float32)
    for s in range(0, len(x), CHUNK):
        block = x[s: s + CHUNK] @ centroids.T
        best[s: s + CHUNK] = np.argmax(block, axis=1)
        sim[s: s + CHUNK] = block[np.arange(len(block)), best[s: s + CHUNK]]
    return best, sim


def cluster_sums(labels: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """(k, dims) sums of the rows of x in each cluster: a sparse one-hot matrix times x, the same sums
    as np.add.at in the same order, about 9 times faster (scipy's sparse product is one thread:
    the result does not depend on the thread count)."""
    import scipy.sparse as sp  # lazy: scipy loads only when this runs

    onehot = sp.csr_matrix((np.ones(len(labels), dtype=x.dtype), (labels, np.arange(len(labels)))), shape=(k, len(labels)))
    return np.asarray(onehot @ x)


def _plus_plus(x: np.ndarray, k: int, rng: np.random.Generator, w: np.ndarray) -> np.ndarray:
    """k-means++ seeding with cosine distance: each next centre drawn with probability ~ w * distance^2."""
    centres = [int(rng.choice(len(x), p=w / w.sum()))]
    dist = np.maximum(1.0 - x @ x[centres[0]], 0.0).astype(np.float64)
    for _ in range(1, k):
        p = w * dist ** 2
        total = p.sum()
        i = int(rng.choice(len(x), p=p / total)) if total > 0 else int(rng.integers(len(x)))
        centres.append(i)
        dist = np.minimum(dist, np.maximum(1.0 - x @ x[i], 0.0))
    return x[centres].copy()


def spherical_kmeans(x: np.ndarray, k: int, seed: int = 0, n_init: int = 20, max_iter: int = 50,
                     weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cluster unit rows of x (each of mass `weights`, default 1) into k groups by cosine similarity;
    returns (labels, unit centroids).

    Lloyd iterations: assign each row to its most similar centroid, then set each centroid to the
    normalised sum of its rows. An emptied cluster is reseeded with the row worst served by its
    centroid. The best of n_init seedings by total similarity is kept.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=np.float64)
    wx = x * w[:, None].astype(np.float32)
    best = None
    for run in range(n_init):
        rng = np.random.default_rng([seed, run])
        centroids = _plus_plus(x, k, rng, w)
        labels = np.full(len(x), -1)
        for _ in range(max_iter):
            new, sim = nearest(x, centroids)
            sums = cluster_sums(new, wx, k)
            counts = np.bincount(new, minlength=k)
            for j in np.flatnonzero(counts == 0):
                worst = int(np.argmin(sim))
                sums[j], sim[worst] = wx[worst], 2.0
                new[worst] = j
            centroids = _unit(sums)
            if np.array_equal(new, labels):
                break
            labels = new
        score = float((nearest(x, centroids)[1] * w).sum())
        if best is None or score > best[0]:
            best = (score, labels.copy(), centroids)
    return best[1], best[2]


def fine_to_coarse(x: np.ndarray, k: int, fine: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`fine` spherical k-means centroids, merged to k groups by spherical k-means over the centroids
    weighted by their sizes; each row takes its fine cluster's group. Returns (labels, unit centroids).

    Marin's datakit merges with average linkage instead; on the demo corpus that leaves a few
    outlying fine clusters as whole groups (k=5 purity about 0.5), the weighted merge does not."""
    fine_labels, fine_centroids = spherical_kmeans(x, fine, seed=seed, n_init=1)
    sizes = np.bincount(fine_labels, minlength=fine).astype(np.float64)
    group, _ = spherical_kmeans(fine_centroids, k, seed=seed, weights=np.maximum(sizes, 1e-9))
    _, group = np.unique(group, return_inverse=True)   # consecutive ids even if a group came out empty
    labels = group[fine_labels]
    return labels, _unit(cluster_sums(labels, x, int(group.max()) + 1))


def order_by_size(labels: np.ndarray, centroids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber clusters from largest (by weight) to smallest, ties by old id: stable, readable ids."""
    mass = np.bincount(labels, weights=weights, minlength=len(centroids))
    order = np.lexsort((np.arange(len(centroids)), -mass))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[labels], centroids[order]


def distinctive_terms(texts: list[str], labels: np.ndarray, k: int, top: int = 10) -> list[list[str]]:
    """Class-based TF-IDF (BERTopic's c-TF-IDF): a cluster's documents are one class; a term scores
    tf(term, class) * log(1 + mean words per class / frequency of the term over all classes)."""
    from sklearn.feature_extraction.text import CountVectorizer  # lazy: sklearn loads only when this runs

    vectorizer = CountVectorizer(token_pattern=r"(?u)\b[^\W\d_][^\W\d]{2,}\b", stop_words="english",
                                 min_df=2 if len(texts) > 20 else 1, max_features=50_000, dtype=np.float64)
    try:
        counts = vectorizer.fit_transform(texts)
    except ValueError:   # no terms at all (every text empty or all stop words)
        return [[] for _ in range(k)]
    terms = vectorizer.get_feature_names_out()
    import scipy.sparse as sp

    onehot = sp.csr_matrix((np.ones(len(labels)), (labels, np.arange(len(labels)))), shape=(k, len(labels)))
    per_class = np.asarray((onehot @ counts).todense())
    words = per_class.sum(axis=1, keepdims=True)
    tf = per_class / np.maximum(words, 1)
    idf = np.log(1 + words.mean() / np.maximum(per_class.sum(axis=0), 1))
    score = tf * idf
    out = []
    for j in range(k):
        order = np.argsort(-score[j], kind="stable")[:top]
        out.append([str(terms[i]) for i in order if score[j, i] > 0])
    return out


def map_2d(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """PCA to two dimensions, scaled into [-1, 1]; float32 (n, 2)."""
    if len(x) < 2:
        return np.zeros((len(x), 2), dtype=np.float32)
    from sklearn.decomposition import PCA  # lazy: sklearn loads only when this runs

    xy = PCA(n_components=min(2, x.shape[1]), random_state=seed, svd_solver="full" if len(x) < 5_000 else "randomized").fit_transform(x)
    if xy.shape[1] < 2:
        xy = np.hstack([xy, np.zeros((len(x), 1))])
    xy = xy - np.median(xy, axis=0)
    scale = np.percentile(np.abs(xy), 99.5, axis=0)
    return np.clip(xy / np.maximum(scale, 1e-9), -1.2, 1.2).astype(np.float32)

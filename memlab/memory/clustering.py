"""Clustering of L2-normalised vectors, shared by the memories that group their units by meaning
(CompassMem's topics, Mnemis's category batches and its LLM-free hierarchy).

Both k-means are spherical (centroids normalised, as the vectors are) and seeded: the same
vectors give the same clusters. ``kmeans`` is faiss's (CompassMem's topics, as measured);
``spherical_kmeans`` adds k-means++ seeding and restarts, which small sets need (faiss's random
initial centroids split 12 words of three kinds into mixed clusters).
"""

from __future__ import annotations

import numpy as np


def normalised(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as float32."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32)


def kmeans(vectors: np.ndarray, k: int, seed: int = 0, iterations: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """(centroids [k, d], assignment [n]) of spherical k-means over L2-normalised ``vectors``."""
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if k <= 1 or len(vectors) <= 1:
        centroid = vectors.mean(0, keepdims=True)
        return normalised(centroid), np.zeros(len(vectors), dtype=np.int64)
    model = faiss.Kmeans(vectors.shape[1], k, niter=iterations, seed=seed, spherical=True, verbose=False,
                         min_points_per_centroid=1)
    model.train(vectors)
    _, assignment = model.index.search(vectors, 1)
    return normalised(model.centroids), assignment[:, 0].astype(np.int64)


def spherical_kmeans(vectors: np.ndarray, k: int, seed: int = 0, restarts: int = 4,
                     iterations: int = 50) -> np.ndarray:
    """The cluster of each row of L2-normalised ``vectors`` (0 .. k'-1, k' <= k: no empty
    cluster): k-means++ seeding, Lloyd iterations on cosine, the best of ``restarts`` runs by
    total similarity to the centroids."""
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(vectors)
    k = min(k, n)
    if k <= 1:
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    best, best_score = np.zeros(n, dtype=np.int64), -np.inf
    for _ in range(restarts):
        centroids = vectors[_plus_plus(vectors, k, rng)]
        for _ in range(iterations):
            assignment = np.argmax(vectors @ centroids.T, axis=1)
            moved = normalised(np.stack([vectors[assignment == c].mean(0) if np.any(assignment == c) else centroids[c]
                                         for c in range(k)]))
            if np.allclose(moved, centroids, atol=1e-6):
                break
            centroids = moved
        score = float(np.max(vectors @ centroids.T, axis=1).sum())
        if score > best_score + 1e-9:
            best, best_score = assignment, score
    _, dense = np.unique(best, return_inverse=True)
    return dense.astype(np.int64)


def _plus_plus(vectors: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """k-means++ seeding on cosine distance (1 - similarity)."""
    chosen = [int(rng.integers(len(vectors)))]
    distance = 1.0 - vectors @ vectors[chosen[0]]
    for _ in range(1, k):
        weights = np.clip(distance, 0.0, None) ** 2
        total = weights.sum()
        pick = int(rng.choice(len(vectors), p=weights / total)) if total > 0 else int(rng.integers(len(vectors)))
        chosen.append(pick)
        distance = np.minimum(distance, 1.0 - vectors @ vectors[pick])
    return chosen


def balanced_groups(vectors: np.ndarray, size: int, cluster_size: int | None = None, seed: int = 0) -> list[list[int]]:
    """Row indexes of ``vectors`` cut into groups of at most ``size`` rows, similar rows
    together: k-means into clusters of at most ``cluster_size`` rows (default ``size``; a
    cluster too large is split again the same way), then the clusters packed whole (largest
    first) into the fewest groups that hold them, so that a group holds several clusters when
    ``cluster_size`` is below ``size``. Every row is in exactly one group; the order is
    deterministic."""
    n = len(vectors)
    cluster_size = min(cluster_size or size, size)
    if n <= size and cluster_size == size:
        return [list(range(n))] if n else []
    clusters = _clusters_of_at_most(np.asarray(vectors, dtype=np.float32), list(range(n)), cluster_size, seed)
    groups: list[list[int]] = []
    for cluster in sorted(clusters, key=lambda c: (-len(c), c[0])):
        fits = next((g for g in groups if len(g) + len(cluster) <= size), None)
        if fits is None:
            groups.append(list(cluster))
        else:
            fits.extend(cluster)
    return [sorted(group) for group in groups]


def _clusters_of_at_most(vectors: np.ndarray, rows: list[int], size: int, seed: int) -> list[list[int]]:
    if len(rows) <= size:
        return [rows]
    k = -(-len(rows) // size)
    assignment = spherical_kmeans(vectors[rows], k, seed)
    parts = [[row for row, a in zip(rows, assignment) if a == c] for c in range(k)]
    parts = [p for p in parts if p]
    if len(parts) == 1:  # identical vectors: k-means cannot separate them, order can
        return [rows[i:i + size] for i in range(0, len(rows), size)]
    return [cluster for part in parts for cluster in _clusters_of_at_most(vectors, part, size, seed)]

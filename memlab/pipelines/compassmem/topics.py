"""CompassMem's topic layer (section 4.2, "Topic Evolution"; appendix B.2).

Topics are clusters of event embeddings. The first construction step initialises them with
k-means (Eq. 6), ``n_clusters = max(2, min(n // 5, 50))`` (B.2; never more than the events);
each later event joins its most similar topic (cosine to the topic's centroid) when the
similarity exceeds ``threshold`` (delta = 0.9), or founds a new topic; and every
``recluster_every`` steps (T = 4) all events are re-clustered by k-means. A *construction step*
is one ``step`` call: the pipeline makes one per session (X_t of Eq. 1 is a session's turns).

k-means is ``memlab.memory.clustering``'s (faiss, spherical, seeded): the same events give the
same topics.
"""

from __future__ import annotations

import numpy as np

from memlab.memory.clustering import kmeans, normalised


def n_clusters(n_events: int) -> int:
    """B.2's cluster count for ``n_events`` events, never more than the events."""
    return min(n_events, max(2, min(n_events // 5, 50)))


class TopicLayer:
    """Topic -> events associations (A of 4.2) and one centroid per topic."""

    def __init__(self, threshold: float = 0.9, recluster_every: int = 4, seed: int = 0) -> None:
        if recluster_every < 1:
            raise ValueError(f"recluster_every must be >= 1, got {recluster_every}")
        self.threshold = threshold
        self.recluster_every = recluster_every
        self.seed = seed
        self.topic_of: dict[str, int] = {}
        self.centroids = np.zeros((0, 0), dtype=np.float32)
        self.steps = 0
        self.reclusterings = 0

    def step(self, new_ids: list[str], new_vectors: np.ndarray, all_ids: list[str], all_vectors: np.ndarray) -> None:
        """One construction step: the events added in it, then every event in memory."""
        self.steps += 1
        if not self.topic_of and len(all_ids):
            self._cluster(all_ids, all_vectors)  # Eq. 6: the first step with events
        else:
            for event_id, vector in zip(new_ids, new_vectors):
                self.assign(event_id, vector)
            if self.steps % self.recluster_every == 0 and len(all_ids):
                self._cluster(all_ids, all_vectors)
                self.reclusterings += 1

    def assign(self, event_id: str, vector: np.ndarray) -> int:
        """The online update: the most similar topic above ``threshold``, else a new topic."""
        vector = normalised(np.asarray(vector, dtype=np.float32)[None, :])[0]
        if len(self.centroids):
            similarity = self.centroids @ vector
            best = int(similarity.argmax())
            if similarity[best] > self.threshold:
                self.topic_of[event_id] = best
                members = sum(1 for t in self.topic_of.values() if t == best)
                # running mean of the members' vectors, re-normalised
                self.centroids[best] = normalised((self.centroids[best] * (members - 1) + vector)[None, :])[0]
                return best
        self.centroids = vector[None, :] if not len(self.centroids) else np.vstack([self.centroids, vector])
        self.topic_of[event_id] = len(self.centroids) - 1
        return self.topic_of[event_id]

    def _cluster(self, ids: list[str], vectors: np.ndarray) -> None:
        self.centroids, assignment = kmeans(vectors, n_clusters(len(ids)), self.seed)
        self.topic_of = {event_id: int(topic) for event_id, topic in zip(ids, assignment)}

    def forget(self, event_id: str) -> None:
        self.topic_of.pop(event_id, None)

    def members(self, topic: int) -> list[str]:
        return [event_id for event_id, t in self.topic_of.items() if t == topic]

    @property
    def n_topics(self) -> int:
        return len(set(self.topic_of.values()))

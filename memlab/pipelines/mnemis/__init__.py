"""Mnemis (System-1 similarity search beside a System-2 descent of a category hierarchy): the
pipeline, its memory, its hierarchy construction and its search."""

from memlab.pipelines.mnemis.pipeline import Mnemis

__all__ = ["Mnemis"]

"""The embedded sample: a small original conversation in LoCoMo format, shipped with memlab.

It is the default data of ``memlab run`` and of fast tests: two speakers, five dated
sessions over four months, 80 turns (two with an image caption), and 23 questions covering
the five LoCoMo categories, with temporal answers that need relative dates ("last
Saturday", "two weeks ago", "next month") resolved against the session dates.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from memlab.data.locomo import read_locomo
from memlab.data.report import LoadReport
from memlab.types import Conversation

log = logging.getLogger(__name__)

SAMPLE_NAME = "sample_locomo.json"


def sample_path() -> Path:
    """Where the sample file is (inside the installed package)."""
    return Path(str(resources.files("memlab.data") / "samples" / SAMPLE_NAME))


def read_sample() -> tuple[list[Conversation], LoadReport]:
    """The sample's conversations and load report."""
    return read_locomo(sample_path())


def load_sample() -> list[Conversation]:
    """The sample's conversations (one)."""
    conversations, report = read_sample()
    log.debug(report.summary())
    return conversations

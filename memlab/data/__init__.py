"""Benchmark data as ``memlab.types.Conversation`` objects.

* ``load_locomo(path)``: the LoCoMo JSON file (``memlab.data.locomo`` documents the mapping
  and every quirk it repairs).
* ``load_longmemeval(path)``: an official LongMemEval JSON file or a processed folder
  (``memlab.data.longmemeval`` documents how haystacks, abstention and evidence are built).
* ``load_dataset(path)``: either, told apart by content.
* ``load_sample()``: the small LoCoMo-format conversation shipped with memlab
  (``SAMPLE_PATH``).
* ``select_conversations(conversations, ids)``: the given ids only; an unknown id is an error.
* ``load_conversations(data, ids, sessions)``: a data set (or the sample), those ids, the first
  sessions of each: what a run or a recipe works on.

Every loader ends with ``memlab.data.anonymise``: sessions and turns numbered by position
(``session_3``, ``D3:7``), so that no id a pipeline sees carries a label of the source.
Every ``read_*`` twin also returns a ``LoadReport`` (counts and quirks handled); the
``load_*`` functions log its one-line summary. Bad input raises one ``DataError`` that
names the file and the problem.
"""

from __future__ import annotations

from memlab.data.dataset import load_dataset, read_dataset
from memlab.data.errors import DataError
from memlab.data.locomo import load_locomo, read_locomo
from memlab.data.longmemeval import load_longmemeval, read_longmemeval
from memlab.data.report import LoadReport
from memlab.data.sample import load_sample, read_sample, sample_path
from memlab.data.select import load_conversations, select_conversations

#: The embedded sample (LoCoMo format).
SAMPLE_PATH = sample_path()

__all__ = [
    "DataError",
    "LoadReport",
    "SAMPLE_PATH",
    "load_conversations",
    "load_dataset",
    "load_locomo",
    "load_longmemeval",
    "load_sample",
    "read_dataset",
    "read_locomo",
    "read_longmemeval",
    "read_sample",
    "sample_path",
    "select_conversations",
]

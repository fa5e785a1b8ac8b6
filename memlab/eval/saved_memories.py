"""Built memories kept beside a run and answered from later (``memlab run --save-memory DIR`` / ``--memory DIR``).

A folder of saved memories holds one pipeline configuration's memories, one per conversation::

    DIR/memories.json   format and version, the pipeline component, its build configuration, and
                        per conversation: its sub-folder, the sha256 of the history it was built
                        from, when it was saved
    DIR/<conversation>/ the memory as the pipeline's ``save_memory`` writes it (the store's
                        folder: atomic, versioned, checksummed, embedder identity recorded)

The *build configuration* is the pipeline's config node without its ``query_settings``
(``Pipeline``), plus the parts of the memory those settings switch on or off (``built_parts``):
a configuration that differs only in how it answers (top-k, the answerer, a reranker ...)
answers from the same memories; any other difference, another pipeline, or a conversation
whose sessions differ (another ``--sessions`` prefix) is refused with a
``SavedMemoryError`` naming what differs. ``memories.json`` is rewritten atomically after each
memory is saved, so an interrupted run keeps every memory it finished.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memlab.config import COMPONENT
from memlab.errors import MemlabError
from memlab.fileio import creatable_problem, is_subfolder_name, write_json_atomic
from memlab.pipelines.base import Pipeline
from memlab.types import Conversation

INDEX_FILE = "memories.json"
FORMAT = "memlab.SavedMemories"
FORMAT_VERSION = 1
BUILT_PARTS = "built parts"


class SavedMemoryError(MemlabError, ValueError):
    """Saved memories that cannot be used (or a folder that cannot take them); the message says why."""


def build_config(pipeline_node: dict[str, Any], pipeline: Pipeline) -> dict[str, Any]:
    """The part of a pipeline config that decides what ``build`` makes (module docstring), with the
    parts that its query settings switch on or off (``Pipeline.built_parts``)."""
    config = {key: value for key, value in pipeline_node.items() if key not in pipeline.query_settings}
    parts = pipeline.built_parts()
    if parts:  # a key no constructor argument can have; absent where nothing is switched
        config[BUILT_PARTS] = parts
    return config


def history_digest(conversation: Conversation) -> str:
    """sha256 of what a build reads: the speakers and the sessions (ids, times, turns)."""
    history = conversation.history()
    payload = {"speakers": list(history.speakers), "sessions": [dataclasses.asdict(s) for s in history.sessions]}
    return hashlib.sha256(json.dumps(payload, default=str, sort_keys=True).encode("utf-8")).hexdigest()


class SavedMemories:
    """One folder of saved memories for one build configuration (module docstring).

    ``for_saving`` / ``for_loading`` check the folder against the configuration before a run
    starts; ``save`` and ``load`` then handle one conversation each."""

    def __init__(self, folder: Path, config: dict[str, Any], index: dict[str, Any]) -> None:
        self.folder = folder
        self.config = config
        self.index = index

    @classmethod
    def for_saving(cls, folder: str | os.PathLike, config: dict[str, Any]) -> "SavedMemories":
        """Memories of ``config`` to be saved into ``folder``: a new or empty folder, or one holding
        memories of the same build configuration (conversations saved again are replaced)."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise SavedMemoryError(f"--save-memory {folder} is a file, not a folder")
        if folder.is_dir() and any(folder.iterdir()):
            if not (folder / INDEX_FILE).is_file():
                raise SavedMemoryError(f"--save-memory {folder} is a non-empty folder without {INDEX_FILE}: "
                                       "choose a new or empty folder")
            saved = cls.open(folder)
            _check_same_config(folder, saved.config, config)
            return saved
        problem = creatable_problem(folder)
        if problem:
            raise SavedMemoryError(f"--save-memory {problem}")
        return cls(folder, config, {"format": FORMAT, "format_version": FORMAT_VERSION, "build_config": config,
                                    "memories": {}})

    @classmethod
    def for_loading(cls, folder: str | os.PathLike, config: dict[str, Any],
                    conversations: list[Conversation]) -> "SavedMemories":
        """The memories in ``folder``, once they are of ``config``'s build configuration and hold
        every one of ``conversations``, built from the same sessions."""
        folder = Path(folder)
        if not (folder / INDEX_FILE).is_file():
            raise SavedMemoryError(f"--memory {folder}: no {INDEX_FILE}, so not a folder of saved memories "
                                   "(memlab run --save-memory writes one)")
        saved = cls.open(folder)
        _check_same_config(folder, saved.config, config)
        for conversation in conversations:
            entry = saved.index["memories"].get(conversation.id)
            if entry is None:
                raise SavedMemoryError(f"--memory {folder}: no saved memory of {conversation.id} "
                                       f"(it holds {', '.join(sorted(saved.index['memories'])) or 'none'})")
            if entry.get("history_sha256") != history_digest(conversation):
                raise SavedMemoryError(f"--memory {folder}: the memory of {conversation.id} was built from other "
                                       "sessions (another --sessions prefix or other data)")
        return saved

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "SavedMemories":
        """The saved memories in ``folder``, whatever their configuration (for reading them: export)."""
        folder = Path(folder)
        try:
            index = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SavedMemoryError(f"{folder / INDEX_FILE}: unreadable ({type(e).__name__}: {e})") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("memories"), dict) \
                or not isinstance(index.get("build_config"), dict):
            raise SavedMemoryError(f"{folder / INDEX_FILE}: not a {FORMAT} index")
        if index.get("format_version") != FORMAT_VERSION:
            raise SavedMemoryError(f"{folder / INDEX_FILE}: format version {index.get('format_version')}, this memlab "
                                   f"reads version {FORMAT_VERSION}; build the memories again")
        for conversation, entry in index["memories"].items():
            name = entry.get("folder") if isinstance(entry, dict) else None
            # The index names sub-folders only: a path in it would be followed out of the folder.
            if not is_subfolder_name(name) or name == INDEX_FILE or not isinstance(entry.get("history_sha256"), str):
                raise SavedMemoryError(f"{folder / INDEX_FILE}: the entry of {conversation!r} must give a 'folder' that "
                                       f"names a sub-folder and a 'history_sha256' (got {_short(entry)})")
        return cls(folder, index["build_config"], index)

    def save(self, pipeline: Pipeline, conversation: Conversation, memory: Any) -> Path:
        """Save ``conversation``'s built ``memory`` (replacing an earlier one of it) and record it."""
        name = self.folder_names([conversation.id])[conversation.id]
        self.folder.mkdir(parents=True, exist_ok=True)
        pipeline.save_memory(memory, self.folder / name)
        self.record(conversation, name)
        return self.folder / name

    def folder_names(self, conversation_ids: list[str]) -> dict[str, str]:
        """The sub-folder each conversation's memory is saved into: its recorded one, or a free
        name (distinct among ``conversation_ids``, so workers can save side by side)."""
        taken = {entry["folder"] for entry in self.index["memories"].values()}
        names: dict[str, str] = {}
        for conversation_id in conversation_ids:
            entry = self.index["memories"].get(conversation_id)
            names[conversation_id] = entry["folder"] if entry else self._free_name(conversation_id, taken)
            taken.add(names[conversation_id])
        return names

    def record(self, conversation: Conversation, name: str) -> None:
        """Record the memory saved into sub-folder ``name`` as ``conversation``'s (the index is
        rewritten atomically; in a parallel run only the run's own process records)."""
        self.index["memories"][conversation.id] = {
            "folder": name, "history_sha256": history_digest(conversation),
            "saved": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        write_json_atomic(self.folder / INDEX_FILE, self.index, sort_keys=True)

    def load(self, pipeline: Pipeline, conversation: Conversation) -> Any:
        """``conversation``'s saved memory, checked by the store as it loads (``MemoryStoreError``)."""
        return pipeline.load_memory(self.folder / self.index["memories"][conversation.id]["folder"])

    @staticmethod
    def _free_name(conversation_id: str, taken: set[str]) -> str:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", conversation_id).strip("._") or "conversation"
        name, n = base, 1
        while name in taken or name == INDEX_FILE:
            n += 1
            name = f"{base}-{n}"
        return name


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_same_config(folder: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    if saved.get(COMPONENT) != current.get(COMPONENT):
        raise SavedMemoryError(f"{folder}: memories built by {saved.get(COMPONENT)}, not by {current.get(COMPONENT)}")
    differing = sorted(key for key in set(saved) | set(current) if saved.get(key) != current.get(key))
    if differing:
        raise SavedMemoryError(
            f"{folder}: memories built with another configuration of {current.get(COMPONENT)} (differs in "
            f"{', '.join(differing)}); only settings that do not change the build may differ")

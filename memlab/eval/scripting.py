"""What the build-and-measure scripts of ``eval/`` share: the arguments naming a pipeline and the
conversations to build it on, the checks before anything is built (a trained stage is not
measured on a conversation it learnt from unless asked; bad data is one error line), and
``reports_script_errors``, which turns a ``ScriptError`` into that line and exit status 2."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from torch import nn

from memlab.config import build_pipeline
from memlab.data import DataError
from memlab.data.select import load_conversations
from memlab.errors import MemlabError
from memlab.held_out import refuse_training_overlap


class ScriptError(MemlabError):
    """A problem a script reports as one ``error:`` line and exit status 2."""


def reports_script_errors(main: Callable[..., int]) -> Callable[..., int]:
    """``main`` with a ``ScriptError`` printed as ``error: ...`` on stderr and returned as status 2."""

    @functools.wraps(main)
    def wrapped(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except ScriptError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    return wrapped


def add_build_arguments(parser: argparse.ArgumentParser, sessions: bool = True) -> None:
    """CONFIG, ``--data``, ``--conversations``, ``--sessions`` (with ``sessions``),
    ``--allow-training-overlap`` and the trailing ``key=value`` overrides."""
    parser.add_argument("config")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated conversation ids")
    if sessions:
        parser.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    parser.add_argument("--allow-training-overlap", action="store_true",
                        help="build on conversations a trained stage learnt from (refused otherwise)")
    parser.add_argument("overrides", nargs="*")


def pipeline_and_conversations(args: argparse.Namespace, *also: nn.Module) -> tuple[Any, list]:
    """The pipeline of ``args.config`` (with its overrides, in eval mode) and the conversations
    to build; ``ScriptError`` when a trained stage of it (or of ``also``) learnt from one of them
    and ``--allow-training-overlap`` was not given, or when the data cannot be read."""
    pipeline, _, _ = build_pipeline(args.config, args.overrides)
    ids = args.conversations.split(",")
    try:  # the run's own refusal, from the ids alone, before the data is read
        for module in (pipeline, *also):
            refuse_training_overlap(module, ids, args.allow_training_overlap)
    except ValueError as e:
        raise ScriptError(f"{args.config}: {e}") from None
    try:
        conversations = load_conversations(args.data, ids, sessions=getattr(args, "sessions", None))
    except DataError as e:
        raise ScriptError(str(e)) from None
    pipeline.eval()
    return pipeline, conversations

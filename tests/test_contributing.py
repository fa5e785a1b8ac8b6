"""CONTRIBUTING.md stays true: the memlab commands it shows still parse (and answer --help), and
the files and modules it names exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from memlab.cli import _parser, main

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "CONTRIBUTING.md").read_text()


def shown_commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", PAGE, flags=re.S)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.startswith("memlab ")]


def test_the_page_shows_commands():
    assert {command[1] for command in shown_commands()} >= {"run", "train", "evaluate-stage"}


@pytest.mark.parametrize("command", shown_commands(), ids=lambda c: " ".join(c[:3]))
def test_a_shown_command_still_parses_and_answers_help(command):
    args, extra = _parser().parse_known_args(command[1:])
    assert all("=" in e and not e.startswith("-") for e in extra)  # only key=value overrides left over
    with pytest.raises(SystemExit) as exit_:
        main([command[1], "--help"])
    assert exit_.value.code == 0
    for token in command[2:]:
        if token.startswith(("configs/", "checkpoints/")):
            assert (REPO / token).exists(), token


def test_the_files_and_modules_it_names_exist():
    named = set(re.findall(r"`((?:memlab|configs|train|tests)/[\w/.<>-]+)`", PAGE))
    concrete = {path for path in named if "<" not in path}
    assert concrete and all((REPO / path).exists() for path in concrete), sorted(p for p in concrete
                                                                              if not (REPO / p).exists())
    for dotted in set(re.findall(r"`(memlab(?:\.\w+)+)`", PAGE)):
        module = dotted if (REPO / (dotted.replace(".", "/") + ".py")).exists() else dotted.rpartition(".")[0]
        assert (REPO / (module.replace(".", "/") + ".py")).exists() or (REPO / module.replace(".", "/")).is_dir(), dotted

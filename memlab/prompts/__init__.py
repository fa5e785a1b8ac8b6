"""Prompt templates, one file each, under ``memlab/prompts/<system>/<name>.txt``.

A file starts with a header block that says where the prompt comes from, then ``---``, then
the template body::

    source: CompassMem (Memory Matters More), appendix F.2, "Response Generation Prompt"
    status: published            # or "written" for a prompt the paper only describes
    ---
    Your task is to answer the QUESTION based on the provided CONTEXT.
    ...  CONTEXT: {context}  ...

Placeholders are ``{name}``. Only names passed to ``render`` are substituted, so JSON braces
in a published prompt are left as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from memlab.errors import MemlabError

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class PromptError(MemlabError, ValueError):
    pass


@dataclass(frozen=True)
class PromptTemplate:
    id: str
    source: str
    status: str
    body: str

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER.findall(self.body))

    def render(self, **values: object) -> str:
        missing = self.placeholders - set(values)
        if missing:
            raise PromptError(f"prompt {self.id!r} needs values for {sorted(missing)}")
        return _PLACEHOLDER.sub(
            lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), self.body
        )


@lru_cache(maxsize=None)
def load_prompt(prompt_id: str) -> PromptTemplate:
    """Load ``memlab/prompts/<prompt_id>.txt`` (e.g. ``"compassmem/answer"``)."""
    system, _, name = prompt_id.partition("/")
    if not name:
        raise PromptError(f"prompt id must be '<system>/<name>', got {prompt_id!r}")
    try:
        text = resources.files("memlab.prompts").joinpath(system, f"{name}.txt").read_text("utf-8")
    except FileNotFoundError:
        raise PromptError(f"no prompt file memlab/prompts/{system}/{name}.txt") from None
    header, sep, body = text.partition("\n---\n")
    if not sep:
        raise PromptError(f"prompt {prompt_id!r}: missing '---' line after the header")
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in header.splitlines()) if k.strip()
    )
    if "source" not in fields:
        raise PromptError(f"prompt {prompt_id!r}: header must name its 'source'")
    return PromptTemplate(
        id=prompt_id,
        source=fields["source"],
        status=fields.get("status", "published"),
        body=body.strip("\n"),
    )

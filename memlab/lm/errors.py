"""The errors of language-model calls and of reading their replies, shared by every backend,
the response cache and the parsers."""

from __future__ import annotations

from memlab.errors import MemlabError


class LMError(MemlabError, RuntimeError):
    """Base class of language-model errors."""


class LMUnavailableError(LMError):
    """The model cannot be reached or loaded (after retries, where retries make sense)."""


class RequestError(LMError):
    """The backend refused or botched this one request (HTTP 400, a prompt too long for the
    context) while it answers others: the request's failure, not the backend's. A prompted
    stage counts it as that call's failure and goes on (``PromptedStage``)."""


class PromptTooLongError(RequestError):
    """The prompt does not fit the model's context window."""


class ParseError(MemlabError, ValueError):
    """A completion could not be turned into the expected structure (see ``memlab.lm.jsonparse``).

    ``salvage``: a degraded but usable output the parser could still make from the reply (the
    distinct items of a looping list, say). ``PromptedStage`` keeps it, instead of the stage's
    empty fallback, when the retry fails too; the call still counts as a failure.
    """

    def __init__(self, message: str, salvage: object = None) -> None:
        super().__init__(message)
        self.salvage = salvage


class RefusedReplyError(ParseError):
    """A reply no reading of which is trusted, not even a free-text one or a fallback schema: a
    parser that tries several readings re-raises it, and the call is retried and counted."""


class AmbiguousReplyError(RefusedReplyError):
    """The reply contradicts itself (its JSON gives a key twice, with different values)."""


class OversizedReplyError(RefusedReplyError):
    """The reply is longer (``jsonparse.MAX_REPLY_CHARS``) or holds an array of more items
    (``jsonparse.MAX_ITEMS``) than any reply may: a runaway generation, refused before it is
    validated or searched further."""


class RuleBrokenError(ParseError):
    """A reply that reads well but breaks a rule its stage's contract states (one category over
    the whole batch, a fact closed without the contradiction quoted). The single retry names
    the rule (``PromptedStage.RULE_MESSAGE``) and the stage counts the reply in
    ``rejected_replies``; ``salvage`` is the reply less what broke the rule."""

"""The one base of the errors memlab raises on purpose.

Bad input (a config, data, a saved file that fails its checks), an unusable reply, a model
server that is down: each is raised as a subclass of ``MemlabError`` (and of the built-in type
its callers catch, ``ValueError`` or ``RuntimeError``), with a message that names the problem.
Where a run reports an error and goes on (a conversation whose build failed), a ``MemlabError``
is one log line; any other exception is a bug and keeps its traceback.
"""


class MemlabError(Exception):
    """An expected failure, fully described by its one-line message."""

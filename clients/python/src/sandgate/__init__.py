"""sandgate: a standard-library client for the sandgate execution gateway.

- :class:`SandgateClient` / :class:`Session`: the HTTP API, with NDJSON
  streaming of runs.
- :mod:`sandgate.deepagents`: ``SandgateBackend``, a deepagents sandbox
  backend.
- :mod:`sandgate.deerflow`: ``SandgateSandbox`` and
  ``SandgateSandboxProvider``, DeerFlow's sandbox abstractions.
"""

from .client import (
    NDJSON,
    Decision,
    FileEntry,
    GrepHit,
    GrepResult,
    Listing,
    Page,
    Risk,
    RunResult,
    SandgateClient,
    SandgateError,
    Session,
)

__all__ = [
    "NDJSON",
    "Decision",
    "FileEntry",
    "GrepHit",
    "GrepResult",
    "Listing",
    "Page",
    "Risk",
    "RunResult",
    "SandgateClient",
    "SandgateError",
    "Session",
]

__version__ = "0.1.0"

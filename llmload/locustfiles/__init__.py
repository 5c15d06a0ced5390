"""The locustfiles shipped in the package: ``locust -f $(llmload locustfile chat)`` works from any directory.

``chat.py``, ``completions.py``, ``responses.py``, ``messages.py``, ``embeddings.py`` and ``mixed.py``
are the same three lines as the repository's ``locustfiles/`` (a locustfile of your own
is those three lines too). Importing this package does nothing; ``path`` finds a file without importing it (which
would import Locust).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["NAMES", "path"]

NAMES = ("chat", "completions", "responses", "messages", "embeddings", "mixed")


def path(name: str) -> Path:
    """The installed file of locustfile ``name`` (one of ``NAMES``, ``.py`` optional).

    Raises:
        ValueError: not one of ``NAMES``.
    """
    stem = name.removesuffix(".py")
    if stem not in NAMES:
        raise ValueError(f"no locustfile {name!r} in llmload; pick one of: {', '.join(NAMES)}")
    return Path(__file__).resolve().parent / f"{stem}.py"

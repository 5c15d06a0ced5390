"""llmload in Locust's web UI: the start form's checks, RESET, and the LLM tabs."""

from __future__ import annotations

from locust.env import Environment

from llmload.web import form, tab

__all__ = ["form", "install", "tab"]


def install(environment: Environment) -> None:
    """Check the start form and add the LLM tabs (master or single process with the web UI)."""
    form.install(environment)
    tab.install(environment)

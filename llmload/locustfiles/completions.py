"""Completion clients: `locust -f $(llmload locustfile completions) -H http://HOST:PORT` (docs/guides/apis.md)."""

from llmload.edge import hooks
from llmload.edge.users import CompletionUser

hooks.install()

__all__ = ["CompletionUser"]

"""Responses API clients: `locust -f $(llmload locustfile responses) -H http://HOST:PORT` (docs/guides/apis.md)."""

from llmload.edge import hooks
from llmload.edge.api_users import ResponsesUser

hooks.install()

__all__ = ["ResponsesUser"]

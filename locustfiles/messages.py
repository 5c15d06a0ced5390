"""Anthropic Messages clients: `locust -f locustfiles/messages.py -H http://HOST:PORT` (docs/guides/apis.md)."""

from llmload.edge import hooks
from llmload.edge.api_users import MessagesUser

hooks.install()

__all__ = ["MessagesUser"]

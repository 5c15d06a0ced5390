"""Anthropic Messages clients: `locust -f locustfiles/messages.py -H http://HOST:PORT` (see README)."""

from llmload.edge import hooks
from llmload.edge.api_users import MessagesUser

hooks.install()

__all__ = ["MessagesUser"]

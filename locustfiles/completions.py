"""Completion clients: `locust -f locustfiles/completions.py -H http://HOST:PORT` (see README)."""

from llmload import hooks
from llmload.users import CompletionUser

hooks.install()

__all__ = ["CompletionUser"]

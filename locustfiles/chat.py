"""Chat clients: `locust -f locustfiles/chat.py -H http://HOST:PORT` (see README)."""

from llmload import hooks
from llmload.users import ChatUser

hooks.install()

__all__ = ["ChatUser"]

"""Chat clients: `locust -f locustfiles/chat.py -H http://HOST:PORT` (see README)."""

from llmload.edge import hooks
from llmload.edge.users import ChatUser

hooks.install()

__all__ = ["ChatUser"]

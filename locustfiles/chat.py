"""Chat clients: `locust -f locustfiles/chat.py -H http://HOST:PORT` (docs/guides/apis.md)."""

from llmload.edge import hooks
from llmload.edge.users import ChatUser

hooks.install()

__all__ = ["ChatUser"]

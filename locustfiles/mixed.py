"""Chat, Responses and embeddings users in one run, weighted 3:1:1: `locust -f locustfiles/mixed.py -H http://HOST:PORT`.

Every output breaks the figures down per endpoint (chat, responses, embeddings).
"""

from llmload.edge import hooks
from llmload.edge.api_users import EmbeddingsUser, ResponsesUser
from llmload.edge.users import ChatUser


class Chat(ChatUser):
    weight = 3


class Responses(ResponsesUser):
    weight = 1


class Embeddings(EmbeddingsUser):
    weight = 1


hooks.install()

__all__ = ["Chat", "Embeddings", "Responses"]

"""Chat, Responses and embeddings users in one run, weighted 3:1:1: `locust -f $(llmload locustfile mixed) -H http://HOST:PORT`.

Every output breaks the figures down per endpoint (chat, responses, embeddings).
The user modules are imported, not their classes: Locust runs every user class
a locustfile's namespace holds, so an imported ``ChatUser`` would run too.
"""

from llmload.edge import api_users, hooks, users


class Chat(users.ChatUser):
    weight = 3


class Responses(api_users.ResponsesUser):
    weight = 1


class Embeddings(api_users.EmbeddingsUser):
    weight = 1


hooks.install()

__all__ = ["Chat", "Embeddings", "Responses"]

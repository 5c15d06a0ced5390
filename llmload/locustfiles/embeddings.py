"""Embeddings clients: `locust -f $(llmload locustfile embeddings) -H http://HOST:PORT` (docs/guides/apis.md)."""

from llmload.edge import hooks
from llmload.edge.api_users import EmbeddingsUser

hooks.install()

__all__ = ["EmbeddingsUser"]

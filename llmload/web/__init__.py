"""llmload in Locust's web UI: the start form's checks and the statistics RESET covers."""

from llmload.web.form import install

__all__ = ["install"]

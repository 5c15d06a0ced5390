"""Locust users for the other APIs servers speak: the Responses API, Anthropic Messages and embeddings.

They share ``LLMUser``'s loop, accounting and outputs (``llmload.edge.users``);
only their request bodies (``llmload.request.api_bodies``) and reply decoding
(``llmload.request.typed_events``) differ. Figures are kept per endpoint
(``responses``, ``messages``, ``embeddings``), so one locustfile may mix them
with chat and completions users under Locust weights.
"""

from __future__ import annotations

from llmload.edge.runtime import Runtime
from llmload.edge.users import LLMUser, _draw, _prompt_for
from llmload.request.api_bodies import build_embeddings_request, build_messages_request, build_responses_request
from llmload.request.payloads import LLMRequest
from llmload.workload.prompts import Prompt

__all__ = ["EmbeddingsUser", "MessagesUser", "ResponsesUser"]


class ResponsesUser(LLMUser):
    """Sends ``POST /v1/responses`` (OpenAI Responses API) with the prompt's messages as ``input``."""

    abstract = False
    endpoint = "responses"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build a Responses request (see ``LLMUser.build_request``)."""
        config = runtime.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_responses_request(
            model=runtime.model or "",
            messages=[{"role": m.role, "content": m.content} for m in prompt.messages],
            max_tokens=max_tokens or prompt.max_tokens or config.max_tokens,
            temperature=config.temperature,
            stream=config.stream,
            requested_prompt_tokens=prompt.requested_tokens,
            ignore_eos=config.ignore_eos,
            extra=config.extra_body,
            path=config.endpoint_path,
        )


class MessagesUser(LLMUser):
    """Sends Anthropic ``POST /v1/messages`` with ``anthropic-version`` and the API key as ``x-api-key``."""

    abstract = False
    endpoint = "messages"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build a Messages request (see ``LLMUser.build_request``)."""
        config = runtime.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_messages_request(
            model=runtime.model or "",
            messages=[{"role": m.role, "content": m.content} for m in prompt.messages],
            max_tokens=max_tokens or prompt.max_tokens or config.max_tokens,
            temperature=config.temperature,
            stream=config.stream,
            requested_prompt_tokens=prompt.requested_tokens,
            ignore_eos=config.ignore_eos,
            extra=config.extra_body,
            api_key=_api_key(runtime),
            path=config.endpoint_path,
        )


class EmbeddingsUser(LLMUser):
    """Sends ``POST /v1/embeddings`` with a batch of ``--batch-size`` prompts (one vector expected per prompt)."""

    abstract = False
    endpoint = "embeddings"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build an embeddings request: ``prompt`` and the next ``--batch-size`` − 1 prompts (``max_tokens`` unused)."""
        config = runtime.config
        first = _prompt_for(runtime, max_tokens, prompt)
        batch = [first] + [first if max_tokens is not None else _draw(runtime) for _ in range(config.batch_size - 1)]
        texts = ["\n".join(m.content for m in p.messages) for p in batch]
        requested = [p.requested_tokens for p in batch]
        return build_embeddings_request(
            model=runtime.model or "",
            inputs=texts,
            extra={k: v for k, v in (config.extra_body or {}).items() if k != "stream_options"},
            requested_prompt_tokens=None if None in requested else sum(r or 0 for r in requested),
            path=config.endpoint_path,
        )

    def _request_for(self, runtime: Runtime, prompt: Prompt) -> LLMRequest:
        """A batch is built fresh each time (its other prompts are drawn with it); one input batches are cached."""
        if runtime.config.batch_size == 1:
            return super()._request_for(runtime, prompt)
        return self.build_request(runtime, prompt=prompt)


def _api_key(runtime: Runtime) -> str | None:
    """The run's API key (sent as ``Authorization: Bearer``), for Anthropic's ``x-api-key``; None without one."""
    if any(name.lower() == "x-api-key" for name in runtime.headers):
        return None  # --api-key-header x-api-key already sends it
    value = runtime.headers.get("Authorization", "")
    return value[len("Bearer ") :] if value.startswith("Bearer ") else None

"""Locust users for the other APIs servers speak: the Responses API, Anthropic Messages and embeddings.

They share ``LLMUser``'s loop, accounting and outputs (``llmload.edge.users``);
only their request bodies (``llmload.request.api_bodies``) and reply decoding
(``llmload.request.typed_events``) differ. Figures are kept per endpoint
(``responses``, ``messages``, ``embeddings``), so one locustfile may mix them
with chat and completions users under Locust weights.
"""

from __future__ import annotations

import dataclasses
import logging

from llmload.edge.runtime import Runtime
from llmload.edge.users import LLMUser, _draw, _prompt_for, _runtime
from llmload.request.api_bodies import (
    build_embeddings_request,
    build_messages_request,
    build_responses_request,
    messages_connection_headers,
)
from llmload.request.payloads import LLMRequest
from llmload.request.record import RequestRecord
from llmload.workload.prompts import Prompt

__all__ = ["EmbeddingsUser", "MessagesUser", "ResponsesUser"]

log = logging.getLogger(__name__)


class ResponsesUser(LLMUser):
    """Sends ``POST /v1/responses`` (OpenAI Responses API) with the prompt's messages as ``input``.

    With ``--turns`` and ``--responses-history server``, a turn after the
    first sends only its new message with ``previous_response_id`` (the id of
    the last reply, from ``response.created`` / ``response.completed`` or the
    whole body), so the server holds the conversation; system text is sent
    each turn as ``instructions`` (a server does not carry them over). A reply
    without an id, or a failure, makes the next turn send the whole
    conversation (or start a new one) as with ``client``.
    """

    abstract = False
    endpoint = "responses"

    def on_start(self) -> None:
        """Prepare this user (see ``LLMUser.on_start``); no stored response to continue yet."""
        super().on_start()
        self._previous_id: str | None = None  # the server-stored reply the next turn continues
        self._stored_messages = 0  # messages of the conversation the server holds under that id

    @classmethod
    def build_request(
        cls,
        runtime: Runtime,
        max_tokens: int | None = None,
        prompt: Prompt | None = None,
        *,
        previous_response_id: str | None = None,
    ) -> LLMRequest:
        """Build a Responses request (see ``LLMUser.build_request``); ``previous_response_id`` continues a reply."""
        config = runtime.process.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_responses_request(
            model=runtime.process.model or "",
            messages=[{"role": m.role, "content": m.content} for m in prompt.messages],
            max_tokens=max_tokens or prompt.max_tokens or config.max_tokens,
            temperature=config.temperature,
            stream=config.stream,
            requested_prompt_tokens=prompt.requested_tokens,
            ignore_eos=config.ignore_eos,
            extra=config.extra_body,
            previous_response_id=previous_response_id,
            path=config.endpoint_path,
        )

    def _request_for(self, runtime: Runtime, prompt: Prompt) -> LLMRequest:
        """Server-side history: only the turn's new messages, with ``previous_response_id``; else as ``LLMUser``."""
        previous = self._previous_id
        if previous is None:
            return super()._request_for(runtime, prompt)
        held = prompt.messages[: self._stored_messages]
        messages = (*(m for m in held if m.role == "system"), *prompt.messages[self._stored_messages :])
        request = self.build_request(
            runtime,
            prompt=Prompt(messages=messages, max_tokens=prompt.max_tokens, requested_tokens=prompt.requested_tokens),
            previous_response_id=previous,
        )
        # the server counts the whole conversation as input: so does a tokenizer fallback
        return dataclasses.replace(request, prompt_text="\n".join(m.content for m in prompt.messages))

    def _note_reply(self, prompt: Prompt, record: RequestRecord) -> None:
        """Keep the reply (``LLMUser._note_reply``) and, with server-side history, its id for the next turn."""
        super()._note_reply(prompt, record)
        conversation, runtime = self._conversation, _runtime(self)
        if conversation is None or conversation.starting or runtime.process.config.responses_history != "server":
            self._previous_id = None
            return
        self._previous_id = record.response_id
        self._stored_messages = len(prompt.messages) + 1  # the turn sent and its reply
        if record.response_id is None and "responses:no-id" not in runtime.process.faults_reported:
            runtime.process.faults_reported.add("responses:no-id")
            log.warning(
                "llmload: --responses-history server: a Responses reply carried no response id; "
                "the next turn sends the whole conversation instead (logged once)"
            )


class MessagesUser(LLMUser):
    """Sends Anthropic ``POST /v1/messages`` with ``anthropic-version`` and the API key as ``x-api-key``."""

    abstract = False
    endpoint = "messages"

    @classmethod
    def connection_headers(cls, runtime: Runtime) -> dict[str, str]:
        """The run's headers without the ``Authorization: Bearer`` made from the key (sent as ``x-api-key``)."""
        return messages_connection_headers(
            runtime.process.headers,
            bearer_from_key=runtime.process.key_sent_as == "Authorization: Bearer",
            explicit=runtime.process.config.headers,
        )

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build a Messages request (see ``LLMUser.build_request``)."""
        config = runtime.process.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_messages_request(
            model=runtime.process.model or "",
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
        config = runtime.process.config
        first = _prompt_for(runtime, max_tokens, prompt)
        batch = [first] + [first if max_tokens is not None else _draw(runtime) for _ in range(config.batch_size - 1)]
        texts = ["\n".join(m.content for m in p.messages) for p in batch]
        requested = [p.requested_tokens for p in batch]
        return build_embeddings_request(
            model=runtime.process.model or "",
            inputs=texts,
            extra={k: v for k, v in (config.extra_body or {}).items() if k != "stream_options"},
            requested_prompt_tokens=None if None in requested else sum(r or 0 for r in requested),
            path=config.endpoint_path,
        )

    def _request_for(self, runtime: Runtime, prompt: Prompt) -> LLMRequest:
        """A batch is built fresh each time (its other prompts are drawn with it); one input batches are cached."""
        if runtime.process.config.batch_size == 1:
            return super()._request_for(runtime, prompt)
        return self.build_request(runtime, prompt=prompt)


def _api_key(runtime: Runtime) -> str | None:
    """The run's API key (sent as ``Authorization: Bearer``), for Anthropic's ``x-api-key``; None without one."""
    if any(name.lower() == "x-api-key" for name in runtime.process.headers):
        return None  # --api-key-header x-api-key already sends it
    if runtime.process.key_sent_as != "Authorization: Bearer":
        return None  # no key, or an Authorization passed with --header: not a key to move
    value = runtime.process.headers.get("Authorization", "")
    return value[len("Bearer ") :] if value.startswith("Bearer ") else None

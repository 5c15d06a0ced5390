"""``llmload sim``: a simulated OpenAI-compatible LLM server with a continuous-batching timing model.

It is llmload's default target for demos and the ground truth of its
end-to-end tests: every timing knob is a flag, every reply is reproducible
from ``--seed``, and ``GET /metrics`` counts exactly what was served.

- Endpoints and request validation: ``llmload.sim.protocol``.
- Reply lengths, words and chunk bytes: ``llmload.sim.replies``.
- Fault injection: ``llmload.sim.faults``; reply shapes real servers send
  (typed parts, object arguments, hidden reasoning, odd stream ends...):
  ``llmload.sim.shapes`` and their bytes ``llmload.sim.shaped_replies``.
- Timing model (batch slots, FIFO queue, prefill and decode step costs):
  ``llmload.sim.engine``.
- Metrics: ``llmload.sim.metrics``. Options and defaults: ``llmload.sim.config``.

Importing this package does nothing and does not import gevent; ``main``
imports the server lazily.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``llmload sim`` with ``argv`` (None: ``sys.argv[1:]``); return the exit status."""
    from llmload.sim.server import run

    return run(argv)

"""What llmload adds to Locust's master/worker messages: the plan option and Locust's option defaults.

The protocol itself is described in ``llmload.edge.cluster``.
"""

from __future__ import annotations

from typing import Any

from llmload.settings.options import OPTIONS

__all__ = ["PLAN_OPTION", "option_defaults"]

PLAN_OPTION = "llmload_plan"
"""The parsed option that carries the run plan (``llmload.run.wire.plan_to_wire``) in every spawn message."""


def option_defaults() -> dict[str, Any]:
    """llmload's options as Locust's parser sets them from no arguments (attribute name -> value)."""
    return {spec.dest: spec.locust_default for spec in OPTIONS}

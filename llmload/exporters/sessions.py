"""The results' ``sessions`` section: per-turn TTFT and prompt growth, and per-session outcomes (``--turns``)."""

from __future__ import annotations

from typing import Any

from llmload.aggregate.stats import OVERFLOW_CATEGORY, EndpointStats
from llmload.exporters.sections import summarize
from llmload.settings.config import RunConfig

__all__ = ["sessions_section"]


def sessions_section(total: EndpointStats, config: RunConfig) -> dict[str, Any] | None:
    """Per-turn and per-session figures of a multi-turn run; None when no request had a turn.

    ``turns[]``: by turn number, the requests sent, the mean TTFT of its
    successes (seconds; null when none had one) and their mean prompt tokens
    (the history's growth). ``completed`` / ``failed``: sessions that ended
    on their last turn / on a failed turn; sessions still going at the stop
    are in neither. ``duration_s``: first send to the end of the last turn,
    think times included.
    """
    if not total.turn_requests:
        return None
    turns = []
    for label in sorted((t for t in total.turn_requests if t != OVERFLOW_CATEGORY), key=int):
        ttft_n = total.turn_ttft_known.get(label, 0)
        prompt_n = total.turn_prompt_known.get(label, 0)
        turns.append(
            {
                "turn": int(label),
                "requests": total.turn_requests[label],
                "ttft_mean_s": total.turn_ttft_us_sum.get(label, 0) / 1e6 / ttft_n if ttft_n else None,
                "prompt_tokens_mean": total.turn_prompt_tokens_sum.get(label, 0) / prompt_n if prompt_n else None,
            }
        )
    ended = total.sessions_completed + total.sessions_failed
    think = config.think_time
    return {
        "turns_per_session": None if config.sessions else config.turns,  # a sessions file: each its own steps
        "think_time": think.describe() if think is not None else None,
        "session_header": config.session_header,
        "completed": total.sessions_completed,
        "failed": total.sessions_failed,
        "turns_completed_mean": total.session_turns_sum / ended if ended else None,
        "duration_s": summarize(total.session_duration_s),
        "turns": turns,
    }

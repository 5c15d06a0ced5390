"""stats_schema: every EndpointStats field declares its merge rule and wire placement once."""

import dataclasses
from dataclasses import dataclass

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import (
    CLIENT_HISTOGRAM_NAMES,
    LATENCY_HISTOGRAM_NAMES,
    STATS_SCHEMA,
    EndpointStats,
    LLMStats,
)
from llmload.aggregate.stats_schema import Merge, counter, counts, histogram, schema_of
from llmload.request.record import Outcome
from llmload.run.wire import from_wire, to_wire


def test_schema_of_refuses_a_field_without_a_merge_rule() -> None:
    @dataclass
    class Forgotten:
        ok_requests: int = counter()
        throttled_requests: int = 0

    with pytest.raises(TypeError, match=r"Forgotten\.throttled_requests has no merge rule"):
        schema_of(Forgotten)


def test_schema_of_reads_rules_and_wire_names_in_declaration_order() -> None:
    @dataclass
    class Small:
        outcomes_seen: dict[Outcome, int] = counts(Outcome, wire="outcomes")
        retries: int = counter()
        wait_s: LatencyHistogram = histogram("client")

    rules = schema_of(Small)
    assert [(r.name, r.merge, r.wire_name, r.wire_group) for r in rules] == [
        ("outcomes_seen", Merge.COUNTS, "outcomes", None),
        ("retries", Merge.SUM, "retries", "counters"),
        ("wait_s", Merge.HISTOGRAM, "wait_s", "hist"),
    ]
    assert rules[0].keys is Outcome
    assert rules[2].group == "client"


def test_schema_histogram_group_must_be_known() -> None:
    with pytest.raises(ValueError, match="'server'"):
        histogram("server")


def test_schema_covers_every_endpoint_stats_field_once() -> None:
    names = [r.name for r in STATS_SCHEMA]
    assert names == list(EndpointStats.__dataclass_fields__)
    assert len({(r.wire_group, r.wire_name) for r in STATS_SCHEMA}) == len(names)


def test_schema_histogram_name_lists_follow_declaration_order() -> None:
    assert LATENCY_HISTOGRAM_NAMES[:5] == ("ttft_s", "ttfc_s", "itl_s", "tpot_s", "e2e_s")
    assert CLIENT_HISTOGRAM_NAMES == ("read_lag_s", "connect_s", "request_lag_s")


def test_schema_counter_fields_are_optional_on_the_wire() -> None:
    """A worker of a release without a counter() field still merges: absent counts 0."""
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 2)
    payload = to_wire(stats)
    assert payload["endpoints"][0]["counters"] == {}
    del payload["endpoints"][0]["counters"]
    assert from_wire(payload) == stats


def test_merge_plan_places_every_schema_field_once():
    """EndpointStats.merge_in loops per merge kind: a field of a kind it does not list would never merge."""
    from llmload.aggregate import stats

    plan = stats._MERGE_PLAN
    placed = [name for group in dataclasses.fields(plan) for name in getattr(plan, group.name)]
    assert sorted(placed) == sorted(r.name for r in stats.STATS_SCHEMA)

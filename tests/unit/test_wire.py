"""wire: version-1 worker payload, compact and strictly validated."""

import copy
import json
from array import array
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from llmload.aggregate.histogram import MAX_INDEX, MIN_INDEX, ZERO_THRESHOLD_S, LatencyHistogram
from llmload.aggregate.stats import MAX_ERROR_CATEGORIES, OVERFLOW_CATEGORY, LLMStats
from llmload.errors import WireFormatError
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.run import wire_histograms
from llmload.run.wire import WIRE_VERSION, from_wire, to_wire

T0 = 1_700_000_000.0


def _typical_delta(n_requests: int = 50, n_tokens: int = 200) -> LLMStats:
    stats = LLMStats.empty()
    for i in range(n_requests):
        ttft = 0.05 + 0.01 * (i % 20)
        times = [ttft + 0.02 * k + 0.0001 * (i % 7) * k for k in range(n_tokens)]
        stats.add(
            RequestRecord(
                endpoint="chat",
                model="m",
                started_at_unix=T0 + i * 0.06,
                token_times_s=times,
                first_content_s=ttft,
                end_s=times[-1] + 0.001,
                prompt_tokens=TokenCount(100, TokenSource.SERVER),
                completion_tokens=TokenCount(n_tokens, TokenSource.SERVER),
            )
        )
    stats.add(
        RequestRecord(
            endpoint="chat",
            model="m",
            started_at_unix=T0,
            outcome=Outcome.HTTP_ERROR,
            error=ErrorInfo("InternalServerError/500", "internal error, request id 1234", 500),
            end_s=0.01,
        )
    )
    stats.add_cancelled("chat", "m", 3)
    return stats


def _all_primitives(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _all_primitives(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_all_primitives(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str | bytes)


def test_wire_payload_is_versioned_and_made_of_primitives() -> None:
    payload = to_wire(_typical_delta())
    assert payload["v"] == WIRE_VERSION == 2
    assert _all_primitives(payload)


def test_wire_round_trips_through_msgpack() -> None:
    stats = _typical_delta()
    assert from_wire(msgpack.unpackb(msgpack.packb(to_wire(stats)))) == stats


def test_wire_version_1_round_trips_through_msgpack_and_json() -> None:
    """An older worker's payload (lists, JSON-safe) still merges into this master."""
    stats = _typical_delta()
    payload = to_wire(stats, version=1)
    assert from_wire(msgpack.unpackb(msgpack.packb(payload))) == stats
    assert from_wire(json.loads(json.dumps(payload))) == stats


def test_wire_empty_stats_round_trip() -> None:
    assert to_wire(LLMStats.empty()) == {"v": 2, "endpoints": []}
    assert from_wire({"v": 1, "endpoints": []}) == LLMStats.empty()
    assert from_wire({"v": 2, "endpoints": []}) == LLMStats.empty()


def test_wire_histogram_buckets_are_packed_arrays() -> None:
    itl = to_wire(_typical_delta())["endpoints"][0]["hist"]["itl_s"]
    indexes = array("i", itl["idx"])
    width = len(itl["cnt"]) // len(indexes)
    counts = array({1: "B", 2: "H", 4: "I", 8: "Q"}[width], itl["cnt"])
    assert max(counts) >= 1 << (8 * width // 2)  # the narrowest width that holds the largest count
    assert len(indexes) == len(counts) > 0
    assert list(indexes) == sorted(indexes)
    assert sum(counts) + itl["zero"] == 50 * 199


def test_wire_packed_counts_take_the_narrowest_width() -> None:
    hist = LatencyHistogram.from_buckets(buckets=[(5, 2**33)], zero_count=0, sum_ns=1, min_s=0.1, max_s=0.1)
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 1)
    encoded = to_wire(stats)
    encoded["endpoints"][0]["hist"]["ttft_s"] = wire_histograms.encode_packed(hist)
    assert len(encoded["endpoints"][0]["hist"]["ttft_s"]["cnt"]) == 8
    assert from_wire(encoded).get("chat", "m").ttft_s == hist
    for count, width in ((255, 1), (256, 2), (2**16, 4), (2**32 - 1, 4)):
        small = LatencyHistogram.from_buckets(buckets=[(5, count)], zero_count=0, sum_ns=1, min_s=0.1, max_s=0.1)
        packed = wire_histograms.encode_packed(small)
        assert len(packed["cnt"]) == width, count
        encoded["endpoints"][0]["hist"]["ttft_s"] = packed
        assert from_wire(encoded).get("chat", "m").ttft_s == small


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h: h.update(cnt=h["cnt"][:-1]), "indexes but"),
        (lambda h: h.update(cnt=h["cnt"] + b"\x01"), "whole number of|indexes but"),
        (lambda h: h.update(idx=h["idx"][:-1]), "whole number of 4-byte items"),
        (lambda h: h.update(idx=list(array("i", h["idx"]))), "bytes"),
        (lambda h: h.update(cnt=bytes(len(h["cnt"]))), "counts must be positive"),
        (lambda h: h.update(idx=h["idx"][:4] * (len(h["idx"]) // 4)), "unique"),
        (lambda h: h.update(min=None), "needs finite 0 <= min <= max"),
        (lambda h: h.update(extra=1), "unknown fields"),
    ],
)
def test_wire_bad_packed_histogram_names_the_field(mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    payload = to_wire(_typical_delta())
    mutate(payload["endpoints"][0]["hist"]["itl_s"])
    with pytest.raises(WireFormatError, match=message) as caught:
        from_wire(payload)
    assert "itl_s" in str(caught.value)


def test_wire_typical_delta_is_compact() -> None:
    # 51 finished requests with 200 tokens each: ~10k ITL samples, but a few hundred buckets.
    size = len(msgpack.packb(to_wire(_typical_delta())))
    assert size < 2_500, size


def test_wire_version_1_histogram_indexes_are_delta_encoded() -> None:
    payload = to_wire(_typical_delta(), version=1)
    itl = payload["endpoints"][0]["hist"]["itl_s"]
    assert len(itl["idx"]) == len(itl["cnt"])
    assert all(d > 0 for d in itl["idx"][1:])
    assert sum(itl["cnt"]) + itl["zero"] == 50 * 199


def test_wire_omits_empty_histograms() -> None:
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 2)
    assert to_wire(stats)["endpoints"][0]["hist"] == {}


@pytest.mark.parametrize(
    ("version", "fix"),
    [(3, "upgrade llmload on the master"), (0, "upgrade llmload on the workers"), (None, "on the workers")],
)
def test_wire_wrong_version_says_what_to_upgrade(version: object, fix: str) -> None:
    payload = to_wire(_typical_delta())
    payload["v"] = version
    with pytest.raises(WireFormatError, match=fix):
        from_wire(payload)


def test_wire_bool_version_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="version True"):
        from_wire({"v": True, "endpoints": []})


def test_wire_non_dict_payload_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="must be a dict, got list"):
        from_wire([1, 2])


def _mutated(mutate: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    payload = copy.deepcopy(to_wire(_typical_delta(), version=1))
    mutate(payload["endpoints"][0])
    return payload


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.pop("outcomes"), r"endpoints\[0\]\.outcomes is missing"),
        (lambda e: e.update(surprise=1), r"unknown fields \['surprise'\]"),
        (lambda e: e["outcomes"].update(exploded=1), "known names"),
        (lambda e: e["outcomes"].update(ok=-1), r"outcomes\.ok must be an integer >= 0"),
        (lambda e: e.update(prompt_tokens_sum="10"), "prompt_tokens_sum must be an integer"),
        (lambda e: e.update(prompt_tokens_sum=True), "prompt_tokens_sum must be an integer"),
        (lambda e: e.update(first_send_unix="now"), "first_send_unix must be a finite number"),
        (lambda e: e["hist"].update(foo_s={}), r"hist must be keyed by"),
        (lambda e: e["hist"]["itl_s"]["cnt"].pop(), "as long as idx"),
        (lambda e: e["hist"]["itl_s"]["idx"].__setitem__(1, 0), "increasing after the first"),
        (lambda e: e["hist"]["itl_s"]["cnt"].__setitem__(0, 0), "positive integer"),
        (lambda e: e["hist"]["e2e_s"].update(min=None), "needs finite 0 <= min <= max"),
        (lambda e: e["hist"]["itl_s"]["idx"].__setitem__(0, MIN_INDEX - 1), r"idx\[0\] must be a step to a bucket"),
        (lambda e: e["hist"]["itl_s"]["idx"].__setitem__(-1, 10**100), r"idx\[\d+\] must be a step to a bucket"),
        (lambda e: e["errors"][0].update(count=0), r"errors\[0\]\.count must be a positive integer"),
        (lambda e: e["errors"][0].update(status="500"), "status must be an integer or None"),
        (lambda e: e["errors"].append(dict(e["errors"][0])), "must be unique"),
    ],
)
def test_wire_bad_shape_names_the_field(mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    with pytest.raises(WireFormatError, match=message) as info:
        from_wire(_mutated(mutate))
    assert "same llmload version" in str(info.value)


def test_wire_decoding_reapplies_error_category_bound() -> None:
    payload = to_wire(LLMStats.empty())
    errors: list[dict[str, Any]] = [
        {"category": f"c{i:03d}", "count": 1, "status": None, "samples": []} for i in range(60)
    ]
    delta = to_wire(_typical_delta())["endpoints"][0]
    delta["errors"] = errors
    delta["outcomes"] = {"http_error": 60}
    payload["endpoints"] = [delta]
    decoded = from_wire(payload).total()
    assert len(decoded.errors) == MAX_ERROR_CATEGORIES
    assert decoded.errors[OVERFLOW_CATEGORY].count == 11


def test_issue19_ttft_with_connect_travels_and_merges_exactly() -> None:
    workers = []
    for offset in (0.0, 0.003):
        stats = LLMStats.empty()
        for i in range(20):
            record = RequestRecord(
                endpoint="chat",
                model="m",
                started_at_unix=T0 + i,
                token_times_s=[0.05 + 0.001 * i, 0.06 + 0.001 * i],
                first_content_s=0.05 + 0.001 * i,
                end_s=0.07 + 0.001 * i,
                connect_s=offset + 0.0001 * i,
            )
            stats.add(record)
        workers.append(stats)
    direct = LLMStats.empty()
    merged = LLMStats.empty()
    for stats in workers:
        direct.merge_in(stats)
        merged.merge_in(from_wire(msgpack.unpackb(msgpack.packb(to_wire(stats)))))
    hist = merged.total().ttft_with_connect_s
    assert hist == direct.total().ttft_with_connect_s
    assert hist.count == 40
    assert hist.max == pytest.approx(0.003 + 0.0019 + 0.069)


# ── version 2: an endpoint's histograms checked together ──────────────────
def _packed_endpoint(stats: LLMStats) -> dict[str, Any]:
    payload = msgpack.unpackb(msgpack.packb(to_wire(stats)))
    endpoint: dict[str, Any] = payload["endpoints"][0]
    return endpoint


def _hists(stats: LLMStats) -> dict[str, LatencyHistogram]:
    ((_, s),) = stats.items()
    return s.histograms()


def _width(raw: dict[str, Any]) -> int:
    return len(raw["cnt"]) // (len(raw["idx"]) // 4)


def test_wire_v2_histograms_decoded_together_equal_the_one_by_one_decode() -> None:
    """The bulk path (all of an endpoint's arrays at once) gives what each histogram's own decode gives."""
    stats = _typical_delta()
    endpoint = _packed_endpoint(stats)
    assert len(endpoint["hist"]) > 2  # several histograms share the endpoint's arrays
    decoded = from_wire({"v": 2, "endpoints": [endpoint]})
    assert decoded == stats
    for wire_name, raw in endpoint["hist"].items():
        name = wire_histograms._HIST_RULES[wire_name].name
        assert _hists(decoded)[name] == wire_histograms.decode_packed(raw, wire_name)
        assert _hists(decoded)[name].quantiles((0.5, 0.99)) == _hists(stats)[name].quantiles((0.5, 0.99))


def test_wire_v2_buckets_out_of_order_but_distinct_still_merge() -> None:
    """A histogram whose indexes are distinct but not ascending leaves the bulk path and is read as before."""
    stats = _typical_delta()
    endpoint = _packed_endpoint(stats)
    raw = endpoint["hist"]["ttft_s"]
    width = _width(raw)
    indexes, counts = array("i", raw["idx"]), [raw["cnt"][k : k + width] for k in range(0, len(raw["cnt"]), width)]
    raw["idx"] = array("i", reversed(indexes)).tobytes()
    raw["cnt"] = b"".join(reversed(counts))
    assert from_wire({"v": 2, "endpoints": [endpoint]}) == stats


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h: h.update(cnt=bytes(_width(h)) + h["cnt"][_width(h) :]), "counts must be positive"),
        (lambda h: h.update(idx=h["idx"][:4] + h["idx"][:-4]), "indexes must be unique"),
        (lambda h: h.update(min=float("nan")), "min"),
        (lambda h: h.update(max=float("inf")), "max"),
        (lambda h: h.update(zero=-1), "zero"),
        (lambda h: h.update(cnt=h["cnt"] + b"\x01"), "cnt"),
    ],
)
def test_wire_v2_a_bad_histogram_among_good_ones_is_named(
    mutate: Callable[[dict[str, Any]], object], message: str
) -> None:
    """A failed whole-array check falls back to the one-by-one checks: the message names the histogram."""
    endpoint = _packed_endpoint(_typical_delta())
    assert set(endpoint["hist"]) > {"ttft_s", "itl_s"}
    mutate(endpoint["hist"]["itl_s"])
    with pytest.raises(WireFormatError, match=message) as caught:
        from_wire({"v": 2, "endpoints": [endpoint]})
    assert "hist.itl_s" in str(caught.value)


def _with_index(raw: dict[str, Any], index: int) -> None:
    """Put ``index`` first (below the range) or last (above it): the indexes still increase."""
    indexes = array("i", raw["idx"])
    indexes[0 if index < 0 else -1] = index
    raw["idx"] = indexes.tobytes()


@pytest.mark.parametrize("index", [-(2**31), MIN_INDEX - 1, MAX_INDEX + 1, 2**31 - 1])
def test_wire_v2_a_bucket_index_beyond_the_histograms_range_is_refused(index: int) -> None:
    """A corrupted report's extreme bucket index is refused when decoded, before anything is built from it.

    Accepted, -2**31 beside 2**31 - 1 would make the master's merge allocate one counter per bucket
    between them (32 GiB), and any index past the range overflows the quantile (GAMMA**index).
    """
    endpoint = _packed_endpoint(_typical_delta())
    _with_index(endpoint["hist"]["itl_s"], index)
    with pytest.raises(WireFormatError, match=f"bucket indexes from {MIN_INDEX} to {MAX_INDEX}, got {index}") as caught:
        from_wire({"v": 2, "endpoints": [endpoint]})
    assert "hist.itl_s.idx" in str(caught.value)
    assert "same llmload version" in str(caught.value)


@pytest.mark.parametrize("index", [-(2**31), MAX_INDEX + 1])
def test_wire_v2_a_bucket_index_beyond_the_range_is_refused_one_by_one_too(index: int) -> None:
    """8-byte counts take the one-by-one decode: the same refusal."""
    hist = LatencyHistogram.from_buckets(buckets=[(5, 2**33), (7, 1)], zero_count=0, sum_ns=1, min_s=0.1, max_s=0.1)
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 1)
    encoded = to_wire(stats)
    raw = wire_histograms.encode_packed(hist)
    assert len(raw["cnt"]) == 2 * 8
    _with_index(raw, index)
    encoded["endpoints"][0]["hist"]["ttft_s"] = raw
    with pytest.raises(WireFormatError, match=f"bucket indexes from {MIN_INDEX} to {MAX_INDEX}, got {index}"):
        from_wire(encoded)


@pytest.mark.parametrize("version", [1, 2])
def test_wire_the_smallest_and_largest_durations_buckets_travel(version: int) -> None:
    """The range's ends are buckets a histogram holds: a report with them is not refused."""
    hist = LatencyHistogram.empty()
    hist.add_many([ZERO_THRESHOLD_S, 0.5, 1e299])
    indexes = [index for index, _ in hist.buckets()]
    assert indexes[0] == MIN_INDEX
    assert MAX_INDEX - 1100 < indexes[-1] <= MAX_INDEX  # 1e299 s: about the largest duration a histogram adds
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 1)
    encoded = to_wire(stats, version=version)
    encoded["endpoints"][0]["hist"]["ttft_s"] = (
        wire_histograms.encode_packed(hist) if version == 2 else wire_histograms.encode_listed(hist)
    )
    assert from_wire(encoded).get("chat", "m").ttft_s == hist

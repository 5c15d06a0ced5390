"""exporters.prometheus and exporters.window: the Collector against a fresh registry, bucket edges,
histogram_quantile accuracy, the live window and label bounds."""

from __future__ import annotations

import bisect
import gc
import itertools
import json
import math
import random
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import MAX_ERROR_CATEGORIES, LLMStats
from llmload.exporters.prometheus import BUCKET_EDGES_S, MAX_LABEL_CHARS, histogram_buckets
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.results import RunOutcome, build_results
from llmload.exporters.window import RunView, SlidingWindow, WindowView, window_part
from llmload.request.record import Outcome, TokenSource
from llmload.testing import T0_UNIX as T0
from llmload.testing import failed_record, ok_record, spaced_s

CHAT = {"endpoint": "chat", "model": "m"}


class FakeClock:
    """Monotonic clock the test moves by hand."""

    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _view(stats: LLMStats, **overrides: object) -> RunView:
    fields: dict[str, object] = {
        "stats": stats,
        "window": None,
        "users": 0,
        "in_flight_requests": 0,
        "workers": 0,
        "run_id": "r1",
        "host": "http://127.0.0.1:8000",
        "model": "m",
        "version": "9.9.9",
    }
    fields.update(overrides)
    return RunView(**fields)  # type: ignore[arg-type]


def _registry(view: RunView) -> CollectorRegistry:
    registry = CollectorRegistry()
    PrometheusExporter(lambda: view, registry=registry)
    return registry


def _prometheus_histogram_quantile(q: float, buckets: list[tuple[str, float]]) -> float:
    """Prometheus' bucketQuantile (promql/quantile.go): linear interpolation inside the bucket."""
    bounds = [(math.inf if le == "+Inf" else float(le), count) for le, count in buckets]
    rank = q * bounds[-1][1]
    b = next(i for i, (_, count) in enumerate(bounds) if count >= rank)
    if b == len(bounds) - 1:
        return bounds[-2][0]
    start, below = (0.0, 0.0) if b == 0 else bounds[b - 1]
    end, count = bounds[b]
    return start + (end - start) * (rank - below) / (count - below)


# ── bucket edges ─────────────────────────────────────────────────────────
def test_bucket_edges_span_1ms_to_10min():
    assert BUCKET_EDGES_S[0] == pytest.approx(0.001, rel=0.02)
    assert BUCKET_EDGES_S[-1] >= 600.0
    assert BUCKET_EDGES_S[-2] < 600.0


def test_bucket_edges_neighbour_ratio_below_5_percent():
    ratios = [b / a for a, b in itertools.pairwise(BUCKET_EDGES_S)]
    assert max(ratios) < 1.05
    assert min(ratios) > 1.04  # not finer than needed: 334 edges


def test_histogram_buckets_edges_are_internal_edges():
    """Values just below an exported edge count at that edge, values just above do not."""
    for edge in BUCKET_EDGES_S[::37]:
        hist = LatencyHistogram.empty()
        hist.add(edge * (1 - 1e-9))
        hist.add(edge * (1 + 1e-9))
        counts = dict(histogram_buckets(hist))
        assert counts[repr(edge)] == 1


def test_histogram_buckets_cumulative_counts_are_exact():
    rng = random.Random(7)
    values = [math.exp(rng.uniform(math.log(0.0005), math.log(900.0))) for _ in range(5000)]
    values += [0.0, 0.0]  # the zero bucket counts below every edge
    hist = LatencyHistogram.empty()
    hist.add_many(values)
    buckets = histogram_buckets(hist)
    assert buckets[-1] == ("+Inf", len(values))
    ordered = sorted(values)
    for le, count in buckets[:-1]:
        assert count == bisect.bisect_right(ordered, float(le)), le


def test_histogram_buckets_are_monotonic_with_334_edges():
    hist = LatencyHistogram.empty()
    hist.add_many([0.01, 0.02, 5.0, 1000.0])
    counts = [count for _, count in histogram_buckets(hist)]
    assert len(counts) == 335
    assert counts == sorted(counts)
    assert counts[-2] == 3  # 1000 s is above the last edge: only in +Inf
    assert counts[-1] == 4


@pytest.mark.parametrize(
    "draw",
    [
        lambda rng: rng.lognormvariate(math.log(0.05), 0.6),  # TTFT-like
        lambda rng: rng.uniform(0.002, 0.004),  # narrow ITL
        lambda rng: rng.choice([0.03, 2.5]) * rng.uniform(0.9, 1.1),  # bimodal
        lambda rng: rng.paretovariate(1.5) * 0.1,  # heavy tail
    ],
    ids=["lognormal", "narrow", "bimodal", "pareto"],
)
def test_histogram_quantile_p99_within_5_percent_of_exact(draw):
    rng = random.Random(11)
    values = sorted(draw(rng) for _ in range(3000))
    hist = LatencyHistogram.empty()
    hist.add_many(values)
    exact_p99 = values[math.ceil(0.99 * len(values)) - 1]
    estimate = _prometheus_histogram_quantile(0.99, histogram_buckets(hist))
    assert estimate == pytest.approx(exact_p99, rel=0.05)
    # ... and against the report's own estimate (same bucket): within the documented 3.1%.
    assert estimate == pytest.approx(hist.quantile(0.99), rel=0.032)


# ── collector ────────────────────────────────────────────────────────────
def _mixed_stats() -> LLMStats:
    stats = LLMStats.empty()
    for ttft in (0.05, 0.1, 0.2):
        stats.add(ok_record(spaced_s(ttft, 0.01, 4), prompt_tokens=7))
    stats.add(ok_record(spaced_s(0.3, 0.01, 2), prompt_tokens=7, endpoint="completions"))
    stats.add(failed_record("HTTP 500 InternalServerError", "boom"))
    stats.add(failed_record("timeout: read idle", "no bytes for 300 s", outcome=Outcome.TIMEOUT))
    stats.add_cancelled("chat", "m", 2)
    return stats


def test_collector_counters_equal_the_results_document():
    stats = _mixed_stats()
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    registry = _registry(_view(stats))
    for entry in results["by_endpoint"]:
        labels = {"endpoint": entry["endpoint"], "model": entry["model"]}
        for outcome, n in entry["requests"]["by_outcome"].items():
            assert registry.get_sample_value("llmload_requests_total", {**labels, "outcome": outcome}) == n
        assert registry.get_sample_value("llmload_prompt_tokens_total", labels) == entry["tokens"]["prompt"]
        completion = sum(
            registry.get_sample_value("llmload_completion_tokens_total", {**labels, "source": s.value}) or 0
            for s in (TokenSource.SERVER, TokenSource.TOKENIZER, TokenSource.CHUNKS)
        )
        assert completion == entry["tokens"]["completion"]
        for error in entry["errors"]:
            value = registry.get_sample_value(
                "llmload_request_errors_total", {**labels, "error_type": error["category"]}
            )
            assert value == error["count"]
        assert (
            registry.get_sample_value("llmload_time_to_first_token_seconds_count", labels)
            == entry["latency"]["ttft_s"]["count"]
        )


def test_nc09_collector_counts_throttled_and_skipped_requests_as_their_own_outcomes():
    stats = LLMStats.empty()
    for _ in range(2):
        stats.add(failed_record("HTTP 429", "slow down", 429, outcome=Outcome.THROTTLED))
    stats.add(failed_record("skipped: UnicodeEncodeError", "surrogates not allowed", None, outcome=Outcome.SKIPPED))
    registry = _registry(_view(stats))
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "throttled"}) == 2
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "skipped"}) == 1
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "http_error"}) == 0


def test_collector_chat_counts():
    registry = _registry(_view(_mixed_stats()))
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "ok"}) == 3
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "cancelled"}) == 2
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "empty"}) == 0
    assert registry.get_sample_value("llmload_completion_tokens_total", {**CHAT, "source": "server"}) == 12
    assert registry.get_sample_value("llmload_prompt_tokens_total", CHAT) == 21


def test_collector_histogram_count_sum_and_buckets():
    stats = LLMStats.empty()
    for ttft in (0.05, 0.1, 0.2):
        stats.add(ok_record(spaced_s(ttft, 0.01, 4), prompt_tokens=7))
    registry = _registry(_view(stats))
    assert registry.get_sample_value("llmload_time_to_first_token_seconds_count", CHAT) == 3
    assert registry.get_sample_value("llmload_time_to_first_token_seconds_sum", CHAT) == pytest.approx(0.35)
    assert registry.get_sample_value("llmload_inter_token_latency_seconds_count", CHAT) == 9
    assert registry.get_sample_value("llmload_time_per_output_token_seconds_count", CHAT) == 3
    assert registry.get_sample_value("llmload_request_duration_seconds_count", CHAT) == 3
    le_099 = next(repr(e) for e in BUCKET_EDGES_S if e >= 0.099)  # the first edge above 0.1 s
    assert float(le_099) > 0.1
    assert registry.get_sample_value("llmload_time_to_first_token_seconds_bucket", {**CHAT, "le": le_099}) == 2
    inf = registry.get_sample_value("llmload_time_to_first_token_seconds_bucket", {**CHAT, "le": "+Inf"})
    assert inf == 3


def test_collector_error_types_bounded_and_messages_never_labels():
    stats = LLMStats.empty()
    for i in range(3 * MAX_ERROR_CATEGORIES):
        stats.add(failed_record(f"type{i:03d}/{i}", f"secret message {i} from the server"))
    registry = _registry(_view(stats))
    error_labels = [
        sample.labels["error_type"]
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "llmload_request_errors_total"
    ]
    assert len(error_labels) == MAX_ERROR_CATEGORIES
    assert "other" in error_labels
    every_label_value = {v for family in registry.collect() for s in family.samples for v in s.labels.values()}
    assert not any("secret" in value for value in every_label_value)
    total = sum(
        registry.get_sample_value("llmload_request_errors_total", {**CHAT, "error_type": label}) or 0
        for label in error_labels
    )
    assert total == 3 * MAX_ERROR_CATEGORIES


def test_collector_long_error_types_truncated_and_merged():
    stats = LLMStats.empty()
    prefix = "x" * MAX_LABEL_CHARS
    stats.add(failed_record(prefix + "a", "m1"))
    stats.add(failed_record(prefix + "b", "m2"))
    registry = _registry(_view(stats))
    assert registry.get_sample_value("llmload_request_errors_total", {**CHAT, "error_type": prefix}) == 2


def test_collector_gauges_and_info():
    view = _view(
        LLMStats.empty(),
        users=64,
        in_flight_requests=17,
        workers=2,
        host="https://user:pw@vllm.example:8443/base",
        started_at_unix=T0,
    )
    registry = _registry(view)
    assert registry.get_sample_value("llmload_users") == 64
    assert registry.get_sample_value("llmload_in_flight_requests") == 17
    assert registry.get_sample_value("llmload_workers") == 2
    assert registry.get_sample_value("llmload_run_start_time_seconds") == T0
    info = {"run_id": "r1", "host": "https://vllm.example:8443/base", "model": "m", "version": "9.9.9"}
    assert registry.get_sample_value("llmload_run_info", info) == 1


def test_collector_without_requests_exports_no_labelled_series():
    registry = _registry(_view(LLMStats.empty()))
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "ok"}) is None
    assert registry.get_sample_value("llmload_run_start_time_seconds") is None
    assert registry.get_sample_value("llmload_window_length_seconds") is None  # no window given


def test_collector_reads_the_snapshot_at_every_scrape():
    stats = LLMStats.empty()
    registry = CollectorRegistry()
    PrometheusExporter(lambda: _view(stats), registry=registry)
    stats.add(ok_record(spaced_s(0.1, 0.01, 3), prompt_tokens=7))
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "ok"}) == 1
    stats.add(ok_record(spaced_s(0.1, 0.01, 3), prompt_tokens=7))
    assert registry.get_sample_value("llmload_requests_total", {**CHAT, "outcome": "ok"}) == 2


def test_collector_window_quantiles_equal_histogram_quantiles():
    clock = FakeClock()
    window = SlidingWindow(10.0, clock=clock)
    delta = LLMStats.empty()
    for ttft in (0.02, 0.04, 0.08, 0.16, 0.32):
        delta.add(ok_record(spaced_s(ttft, 0.01, 5), prompt_tokens=7))
    clock.now_s += 2.0
    window.add(delta, "w1")
    registry = _registry(_view(LLMStats.empty(), window=window.view()))
    expected = delta.get("chat", "m").ttft_s.quantiles([0.5, 0.9, 0.99])
    for q, value in zip(("0.5", "0.9", "0.99"), expected, strict=True):
        got = registry.get_sample_value("llmload_window_time_to_first_token_seconds", {**CHAT, "quantile": q})
        assert got == value
    assert registry.get_sample_value("llmload_window_output_tokens_per_second", CHAT) == pytest.approx(25 / 2.0)
    assert registry.get_sample_value("llmload_window_requests_per_second", CHAT) == pytest.approx(5 / 2.0)
    assert registry.get_sample_value("llmload_window_length_seconds") == 10.0


# ── window ───────────────────────────────────────────────────────────────
def _delta(n_requests: int, tokens: int = 10) -> LLMStats:
    delta = LLMStats.empty()
    for _ in range(n_requests):
        delta.add(ok_record(spaced_s(0.05, 0.01, tokens), prompt_tokens=7))
    return delta


def test_window_rate_divides_by_each_sources_covered_span():
    """Worker 1 reports every 3 s, worker 2 every 1 s: each rate is over its own coverage."""
    clock = FakeClock(0.0)
    window = SlidingWindow(10.0, clock=clock)
    for t in range(1, 15):
        clock.now_s = float(t)
        window.add(_delta(1), "w2")  # 10 tokens/s
        if t % 3 == 0:
            window.add(_delta(6), "w1")  # 60 tokens every 3 s = 20 tokens/s
    view = window.view()
    # At t=14 (window (4, 14]): w1's reports at 6, 9, 12 cover (3, 12]; w2's at 5..14 cover (4, 14].
    assert view.output_tokens_per_s[("chat", "m")] == pytest.approx(30.0)
    assert view.requests_per_s[("chat", "m")] == pytest.approx(3.0)
    assert view.stats.get("chat", "m").succeeded == 18 + 10  # w1: 3 reports x 6, w2: 10 reports


def test_window_drops_deltas_older_than_its_length():
    clock = FakeClock(0.0)
    window = SlidingWindow(10.0, clock=clock)
    clock.now_s = 1.0
    window.add(_delta(5), "w1")
    clock.now_s = 11.0
    assert window.view().stats.is_empty()
    assert window.view().output_tokens_per_s == {}


def test_window_first_delta_covers_time_since_reset():
    clock = FakeClock(50.0)
    window = SlidingWindow(10.0, clock=clock)
    clock.now_s = 60.0
    window.reset()
    clock.now_s = 64.0
    window.add(_delta(2, tokens=8), "local")
    assert window.view().output_tokens_per_s[("chat", "m")] == pytest.approx(16 / 4.0)


def test_window_empty_deltas_extend_the_span():
    clock = FakeClock(0.0)
    window = SlidingWindow(10.0, clock=clock)
    clock.now_s = 2.0
    window.add(_delta(1, tokens=10), "w1")
    clock.now_s = 4.0
    window.add(LLMStats.empty(), "w1")
    assert window.view().output_tokens_per_s[("chat", "m")] == pytest.approx(10 / 4.0)


def test_window_rejects_non_positive_length():
    with pytest.raises(ValueError, match="window length must be a positive number of seconds, got 0"):
        SlidingWindow(0)


# ── Grafana dashboard ────────────────────────────────────────────────────
DASHBOARD = Path(__file__).resolve().parents[2] / "grafana" / "llmload-dashboard.json"


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the shipped Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_grafana_dashboard_uses_only_exported_metrics():
    clock = FakeClock()
    window = SlidingWindow(10.0, clock=clock)
    clock.now_s += 1.0
    window.add(_mixed_stats(), "w1")
    registry = _registry(_view(_mixed_stats(), window=window.view(), started_at_unix=T0))
    exported = {sample.name for family in registry.collect() for sample in family.samples}
    used = {name for expr in dashboard_exprs() for name in re.findall(r"\bllmload_\w+", expr)}
    assert used
    assert used <= exported, used - exported


def test_grafana_dashboard_server_row_queries_the_mapped_vllm_names():
    from llmload.servermetrics import NAMES, ServerKind

    known = {name for names in NAMES[ServerKind.VLLM].values() for name in names}
    used = {name.removesuffix("_bucket") for expr in dashboard_exprs() for name in re.findall(r"\bvllm:\w+", expr)}
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total"} <= used
    assert used <= known, used - known


# Case BC-25: a saturated load generator is visible in Prometheus too, next to lost workers.
def test_client_saturation_and_lost_workers_gauges():
    quiet = _registry(_view(LLMStats.empty()))
    assert quiet.get_sample_value("llmload_client_saturated") == 0.0
    assert quiet.get_sample_value("llmload_lost_workers") == 0.0
    busy = _registry(_view(LLMStats.empty(), client_saturated=True, lost_workers=1))
    assert busy.get_sample_value("llmload_client_saturated") == 1.0
    assert busy.get_sample_value("llmload_lost_workers") == 1.0


def test_client_saturated_help_names_both_causes_cpu_and_read_lag():
    from prometheus_client.exposition import generate_latest

    text = generate_latest(_registry(_view(LLMStats.empty()))).decode()
    (help_line,) = [line for line in text.splitlines() if line.startswith("# HELP llmload_client_saturated ")]
    assert "90% CPU for 5 s" in help_line
    assert "read lag" in help_line
    assert "2 ms" in help_line


def test_read_lag_histogram_resolves_lags_below_a_millisecond():
    from llmload.exporters.prometheus import LAG_BUCKET_EDGES_S

    record = ok_record(spaced_s(0.1, 0.01, 2), prompt_tokens=7)
    record.read_lags_s = [0.0003] * 100 + [0.004]
    stats = LLMStats.empty()
    stats.add(record)
    registry = _registry(_view(stats))
    labels = {"endpoint": "chat", "model": "m"}
    below = max(edge for edge in LAG_BUCKET_EDGES_S if edge < 0.0003)
    above = min(edge for edge in LAG_BUCKET_EDGES_S if edge >= 0.0003)
    bucket = "llmload_client_read_lag_seconds_bucket"
    assert registry.get_sample_value(bucket, {**labels, "le": repr(below)}) == 0
    assert registry.get_sample_value(bucket, {**labels, "le": repr(above)}) == 100
    assert registry.get_sample_value("llmload_client_read_lag_seconds_count", labels) == 101
    assert above / below < 1.2  # ~17% apart: quantiles of sub-millisecond lags are readable


def test_window_of_a_thousand_sources_merges_into_slots_exactly():
    """1,000 workers' 0.5 s deltas: the view equals the merge of the deltas still in the window."""
    clock = FakeClock(0.0)
    window = SlidingWindow(10.0, clock=clock)
    kept = LLMStats.empty()
    for step in range(30):  # 15 s of live reports
        clock.now_s = 0.5 * (step + 1)
        delta = _delta(1 + step % 3)
        for worker in range(1000):
            window.add(delta, f"w{worker}")
        if clock.now_s > 15.0 - 10.0:
            for _ in range(1000):
                kept.merge_in(delta)
    view = window.view()
    assert view.stats == window_part(kept)
    # each worker's deltas of (5, 15] cover its span from its last dropped delta (at 5 s): 10 s
    assert view.requests_per_s[("chat", "m")] == pytest.approx(1000 * sum(1 + s % 3 for s in range(10, 30)) / 10.0)


def test_window_keeps_every_histogram_the_window_gauges_read():
    """The window's families read from what the window keeps equal those read from the whole deltas."""
    stats = _mixed_stats()
    record = ok_record(spaced_s(0.1, 0.01, 3), prompt_tokens=7)
    record.read_lags_s = [0.0003] * 10 + [0.004]
    stats.add(record)
    clock = FakeClock(1.0)
    window = SlidingWindow(10.0, clock=clock)
    window.add(stats, "w1")
    kept = window.view()
    whole = WindowView(kept.length_s, stats, kept.output_tokens_per_s, kept.requests_per_s)

    def window_lines(view: WindowView) -> list[str]:
        text = generate_latest(_registry(_view(LLMStats.empty(), window=view))).decode()
        return [line for line in text.splitlines() if line.startswith("llmload_window_") and "quantile" in line]

    lines = window_lines(kept)
    assert lines == window_lines(whole)
    assert {line.split("{")[0] for line in lines} == {
        f"llmload_window_{name}_seconds"
        for name in (
            "time_to_first_token",
            "inter_token_latency",
            "time_per_output_token",
            "request_duration",
            "client_read_lag",
        )
    }


def test_window_of_many_sources_adds_few_objects_for_the_garbage_collector():
    """The deltas in the window are tuples of numbers the collector stops tracking: a full collection
    walks a few objects per source and slot, not one or more per delta (10,000 here)."""
    clock = FakeClock(0.0)
    window = SlidingWindow(10.0, clock=clock)
    delta = _delta(2)
    gc.collect()
    before = len(gc.get_objects())
    for step in range(20):
        clock.now_s = 0.5 * step
        for source in range(500):
            window.add(delta, f"w{source}")
    gc.collect()
    assert len(gc.get_objects()) - before < 10_000 // 4


def test_scrape_pauses_between_its_large_families_and_reads_one_view():
    """The exporter's pause runs before each histogram and window family; the page is the same without it."""
    stats = _mixed_stats()
    clock = FakeClock(1.0)
    window = SlidingWindow(10.0, clock=clock)
    window.add(stats, "w1")
    view = _view(stats, window=window.view())
    views: list[int] = []
    pauses: list[int] = []

    def snapshot() -> RunView:
        views.append(1)
        return view

    paused = CollectorRegistry()
    PrometheusExporter(snapshot, registry=paused, pause=lambda: pauses.append(len(views)))
    assert generate_latest(paused) == generate_latest(_registry(view))
    assert len(pauses) == 2 * 5  # 4 latency histograms and the read lag, as histograms and as window quantiles
    assert views == [1]

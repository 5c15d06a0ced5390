"""The documented results schema (docs/reference/results.md, docs/guides/sweep.md) matches the code.

Results are built in every mode (closed and open loop, a sweep file, blocked,
failed) through ``results.build_results``, the function the master
writes with. Every key found must be in the docs' schema block, and every
key the block calls unconditional must be present.

Block notation (docs "Results file"): one group of keys per line, ``a.{b, c}``
for ``a.b`` and ``a.c``, ``x[]`` for a list of objects, ``*`` for any key;
after two spaces a note; a note starting with "if" makes the keys
conditional; a note containing "same keys as" makes the keys an alias of the
results schema (``by_endpoint[].requests...`` = ``requests...``).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.exporters.drift import drift_section
from llmload.exporters.load import SendFigures
from llmload.exporters.results import RunOutcome, build_results
from llmload.exporters.timeline import Timeline
from llmload.request.record import ITLKind, RequestRecord, TokenCount, TokenSource
from llmload.run.clock import OffsetEstimate
from llmload.servermetrics import SERVER_COLUMNS, summarise
from llmload.settings.config import LengthSpec, RunConfig
from llmload.settings.goodput import SLO
from llmload.settings.think_time import ThinkTime
from llmload.settings.thresholds import parse_thresholds
from llmload.sweep import parse_sweep, step_section, sweep_document
from llmload.testing import failed_record
from tests.unit.test_servermetrics import fixture, run_of, vllm_text

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCHEMA_PAGES = {"results": DOCS / "reference" / "results.md", "sweep": DOCS / "guides" / "sweep.md"}
"""The page each schema block lives in (the README links there)."""
T0 = 1_700_000_000.0


# ── the docs' blocks ───────────────────────────────────────────────────────
@dataclass(frozen=True)
class DocKey:
    path: str  # expanded: "latency.ttft_s.p50", "errors[].category", "tokens.prompt_sources.*"
    conditional: bool
    alias: bool
    note: str


def _block(name: str) -> str:
    marker = f"<!-- schema: {name} -->"
    holders = [p for p in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))] if marker in p.read_text(encoding="utf-8")]
    assert holders == [SCHEMA_PAGES[name]], f"{marker} must be in {SCHEMA_PAGES[name]} only, found in {holders}"
    text = SCHEMA_PAGES[name].read_text(encoding="utf-8")
    assert text.count(marker) == 1, f"{SCHEMA_PAGES[name]} needs exactly one {marker}"
    after = text[text.index(marker) + len(marker) :]
    body = after[after.index("```text") + len("```text") :]
    return textwrap.dedent(body[: body.index("```")]).strip("\n")


def _split_note(entry: str) -> tuple[str, str]:
    depth = 0
    for i, char in enumerate(entry):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0 and entry[i : i + 2] == "  ":
            return entry[:i], entry[i:].strip()
    return entry, ""


def _expand(pattern: str) -> list[str]:
    segments, depth, current = [], 0, ""
    for char in pattern.replace(" ", ""):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "." and depth == 0:
            segments.append(current)
            current = ""
        else:
            current += char
    segments.append(current)
    choices = [seg[1:-1].split(",") if seg.startswith("{") else [seg] for seg in segments]
    return [".".join(parts) for parts in itertools.product(*choices)]


def schema(name: str) -> list[DocKey]:
    """The keys of one documented schema block."""
    entries: list[str] = []
    for line in _block(name).splitlines():
        if line[:1].isspace() and entries:
            entries[-1] += "  " + line.strip()  # a continuation of the keys or of the note
        elif line.strip():
            entries.append(line.strip())
    keys = []
    for entry in entries:
        pattern, note = _split_note(entry)
        for path in _expand(pattern):
            keys.append(DocKey(path, note.startswith("if "), "same keys as" in note, note))
    return keys


# ── matching ────────────────────────────────────────────────────────────────
def _paths(value: Any, prefix: str = "") -> Iterator[tuple[str, bool]]:
    """Every leaf path of a results document, and whether that leaf is empty (null, [], {})."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _paths(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for item in value:
            yield from _paths(item, prefix + "[]")
    else:
        yield prefix, value is None or value in ([], {})


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path).replace(r"\*", r"[^.]+") + r"\Z")


class Schema:
    def __init__(self, keys: list[DocKey], *, aliases_to: Schema | None = None) -> None:
        self.keys = keys
        self.target = aliases_to or self
        self._plain = [(k, _pattern(k.path)) for k in keys if not k.alias]

    def documents(self, path: str, empty: bool) -> bool:
        """True when ``path`` (a leaf; ``empty`` if null/[]/{}) is documented by this block."""
        if any(pattern.match(path) for _, pattern in self._plain):
            return True
        for key in self.keys:
            if key.alias:
                base, _, first = key.path.rpartition(".")
                if path.startswith(base + "."):
                    rest = path[len(base) + 1 :]
                    if first in ("*", rest.split(".")[0].removesuffix("[]")):
                        return self.target.documents(rest, empty)
        # a null, [] or {} where the block documents an object or a list of them
        return empty and any(k.path.startswith((path + ".", path + "[]")) for k, _ in self._plain)

    def required(self) -> list[str]:
        return [k.path for k in self.keys if not (k.conditional or k.alias or "*" in k.path or "[]" in k.path)]


def _present(required: str, found: dict[str, bool]) -> bool:
    if any(p == required or p.startswith((required + ".", required + "[]")) for p in found):
        return True
    return any(empty and required.startswith(p + ".") for p, empty in found.items())


# ── results in every mode ───────────────────────────────────────────────────
def _ok(start: float, endpoint: str = "chat", delay_s: float | None = None) -> RequestRecord:
    return RequestRecord(
        endpoint=endpoint,
        model="m",
        started_at_unix=start,
        token_times_s=[0.1, 0.12, 0.14],
        first_content_s=0.1,
        end_s=0.5,
        prompt_tokens=TokenCount(10, TokenSource.SERVER),
        completion_tokens=TokenCount(3, TokenSource.SERVER),
        requested_prompt_tokens=9,
        dispatch_delay_s=delay_s,
        client_completion_tokens=4,
        connect_s=0.001,
        read_lags_s=[0.0001, 0.0002],
    )


def _results(stats: LLMStats, config: RunConfig, **facts: Any) -> dict[str, Any]:
    run = {"run_id": "r1", "host": "http://127.0.0.1:8000", "user_classes": ("ChatUser",), "model": "m"}
    return build_results(RunOutcome(stats, config, **run, users=4, workers=2, started_at_unix=T0, **facts))


def closed_loop() -> dict[str, Any]:
    config = dataclasses.replace(
        RunConfig(),
        slo=SLO(ttft_s=0.5, tpot_s=0.1, e2e_s=10.0),
        input_tokens=LengthSpec(mean=64, low=32, high=96),
        output_tokens=LengthSpec(mean=128, stddev=16.0),
        num_requests=4,
    )
    stats = LLMStats.empty()
    for i, endpoint in enumerate(["chat", "completions", "chat"]):
        stats.add(_ok(T0 + i, endpoint), met_slo=True)
    stats.add(failed_record(start_unix=T0 + 0.5, end_s=0.01))
    stats.add_cancelled("chat", "m", 2)
    series = IntervalSeries.empty()
    series.slot(1).merge_in(stats)
    timeline = Timeline(10.0, extra_columns=SERVER_COLUMNS)
    timeline.sample(12.0, {"in_flight_requests": 3, "users": 4, "workers": 2})
    timeline.add_extra(1, {"server_running_requests": 3, "server_generation_tokens": 60})
    rows = tuple(timeline.rows(series, 15.0))
    server = summarise(
        [
            run_of(vllm_text(0, 0, (0, 0, 0), 0), vllm_text(60, 600, (1, 3, 3), 0.3)),
            run_of(fixture("vllm_v1.txt"), fixture("vllm_v1.txt")),  # every other histogram
            run_of(fixture("tgi.txt"), fixture("tgi.txt")),
        ]
    )
    assert server is not None
    server["reset"] = {"baseline_after_s": 0.4, "client_succeeded_before_baseline": 3}  # after a RESET
    long_series = IntervalSeries.empty()
    for index in range(12):
        long_series.slot(index).merge_in(stats)
    drift = drift_section(
        long_series, 10.0, 120.0, {0: {"client_rss_bytes": 1 << 20}, 11: {"client_rss_bytes": 1 << 21}}
    )
    return _results(
        stats,
        config,
        lost_workers=("w1",),
        cpu_saturated_s=6.0,
        timeseries=rows,
        server=server,
        drift=drift,
        worker_clocks={"w1": OffsetEstimate(upper_s=0.004, lower_s=0.0), "w2": OffsetEstimate(upper_s=-300.0)},
        server_warnings=("--server-metrics http://127.0.0.1:9/metrics never answered",),
    )


def open_loop(*, kept_up: bool = False) -> dict[str, Any]:
    config = dataclasses.replace(RunConfig(), request_rate=10.0, arrival="gamma", burstiness=0.5, max_concurrency=8)
    stats = LLMStats.empty()
    for i in range(20):
        stats.add(_ok(T0 + i * 0.5, delay_s=0.001 if kept_up else 0.02 * i))
    sends = SendFigures(10.0, 10.0, 0.0) if kept_up else SendFigures(10.0, 2.0, 1.5)  # else: rate_shortfall
    series = IntervalSeries.empty()
    series.slot(0).merge_in(stats)
    return _results(stats, config, sends=sends, drift=drift_section(series, 10.0, 10.0))


def unlimited_rate() -> dict[str, Any]:
    """--request-rate inf: every request eligible at once, -u bounding the requests in flight."""
    config = dataclasses.replace(RunConfig(), request_rate=float("inf"))
    stats = LLMStats.empty()
    for i in range(8):
        stats.add(_ok(T0 + i * 0.1, delay_s=0.001))
    return _results(stats, config, sends=SendFigures(None, 20.0, None))


def trace_replay() -> dict[str, Any]:
    config = dataclasses.replace(RunConfig(), trace="t.jsonl", num_requests=20)
    stats = LLMStats.empty()
    for i in range(20):
        stats.add(_ok(T0 + i * 0.5, delay_s=0.001))
    return _results(stats, config, sends=SendFigures(2.0, 2.0, None))


def sessions() -> dict[str, Any]:
    config = dataclasses.replace(RunConfig(), turns=2, think_time=ThinkTime("exp", 1.0), session_header="X-S")
    stats = LLMStats.empty()
    for i in range(6):
        record = _ok(T0 + i)
        record.turn = 1 + i % 2
        if record.turn == 2:
            record.session_turns, record.session_duration_s = 2, 1.5
        stats.add(record)
    return _results(stats, config)


def blocked() -> dict[str, Any]:
    return _results(LLMStats.empty(), RunConfig(), blocked='model "other" not served; available: m')


def failed() -> dict[str, Any]:
    stats = LLMStats.empty()
    for i in range(12):
        stats.add(failed_record(start_unix=T0 + i, end_s=0.01))
    return _results(stats, dataclasses.replace(RunConfig(), max_failure_ratio=1.0))


def aborted() -> dict[str, Any]:
    config = dataclasses.replace(RunConfig(), abort_on=parse_thresholds("--abort-on", "error_ratio>0.2 for 2s"))
    breach = {"threshold": "error_ratio>0.2 for 2s", "at_s": 4.0, "from_s": 2.0, "values": [1.0, 0.9]}
    stats = LLMStats.empty()
    stats.add(_ok(T0))
    stats.add(failed_record(start_unix=T0 + 1, end_s=0.01))
    return _results(stats, config, aborted=breach)


def partial() -> dict[str, Any]:
    stats = LLMStats.empty()
    stats.add(_ok(T0))
    return _results(stats, RunConfig(), checkpoint_at_s=300.2)


def sweep_file() -> dict[str, Any]:
    steps = [
        step_section(5.0, open_loop(kept_up=True)),
        step_section(10.0, open_loop()),
        step_section(float("inf"), closed_loop()),
    ]
    return sweep_document(parse_sweep("rate=5,10,inf"), steps, ttft_p99_limit_s=0.01)


MODES = {
    "closed": closed_loop,
    "open": open_loop,
    "unlimited": unlimited_rate,
    "trace": trace_replay,
    "sessions": sessions,
    "blocked": blocked,
    "failed": failed,
    "aborted": aborted,
    "partial": partial,
}


def _found(document: dict[str, Any]) -> dict[str, bool]:
    return dict(_paths(document))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_p6_every_results_key_is_in_the_readme_schema(mode):
    results_schema = Schema(schema("results"))
    undocumented = [path for path, empty in _found(MODES[mode]()).items() if not results_schema.documents(path, empty)]
    assert undocumented == [], f"{mode}: keys missing from docs/reference/results.md: {undocumented}"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_p6_every_unconditional_schema_key_is_in_the_results(mode):
    found = _found(MODES[mode]())
    missing = [path for path in Schema(schema("results")).required() if not _present(path, found)]
    assert missing == [], f"{mode}: docs/reference/results.md lists these keys as always present: {missing}"


def test_p6_every_sweep_file_key_is_in_the_readme_schema():
    results_schema = Schema(schema("results"))
    sweep_schema = Schema(schema("sweep"), aliases_to=results_schema)
    found = _found(sweep_file())
    assert any(path.startswith("knee.") for path in found)  # the knee's keys are checked too
    undocumented = [path for path, empty in found.items() if not sweep_schema.documents(path, empty)]
    assert undocumented == []
    missing = [path for path in sweep_schema.required() if not _present(path, found)]
    assert missing == []


def test_p6_conditional_keys_appear_in_some_mode():
    """Each conditional group of the block is exercised by some mode (so the checks above mean something)."""
    found = {path for build in MODES.values() for path in _found(build())}
    found |= set(_found(sweep_file()))
    for key in Schema(schema("results")).keys:
        if key.conditional and not key.alias and "*" not in key.path and "[]" not in key.path:
            assert any(p == key.path or p.startswith(key.path + ".") for p in found), key.path


def test_p6_itl_kind_values_are_the_documented_ones():
    note = next(k.note for k in schema("results") if k.path == "latency.itl_kind")
    for value in [kind.value for kind in ITLKind] + ["mixed"]:
        assert f'"{value}"' in note


def test_p6_schema_notation_is_parsed_as_documented():
    assert _expand("a.{b, c}.{d, e}") == ["a.b.d", "a.b.e", "a.c.d", "a.c.e"]
    assert _split_note("x.{a,  b}  if y") == ("x.{a,  b}", "if y")
    keys = {k.path: k for k in schema("results")}
    assert keys["load.warning"].conditional
    assert not keys["load.mode"].conditional
    assert keys["by_endpoint[].requests"].alias

"""Run configuration: one frozen value built once from Locust's options and validated.

Every option is declared once in ``llmload.settings.options`` (flag, help, default,
parser); ``RunConfig.from_options`` parses each, then applies the rules that
involve several options. Invalid values raise ``ConfigError`` naming the value
and the fix, before any load is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmload.errors import ConfigError, InvalidOptionsError
from llmload.settings.goodput import SLO
from llmload.settings.option_values import LengthSpec, host_url, parse_rate
from llmload.settings.options import OPTIONS, OptionSpec, default
from llmload.settings.think_time import ThinkTime
from llmload.settings.thresholds import Threshold

__all__ = ["OPTIONS", "LengthSpec", "OpenLoop", "OptionSpec", "RunConfig", "Timeouts", "parse_rate"]

ARRIVALS = ("poisson", "constant", "gamma")
_POISSON_SHAPE = 1.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request time limits in seconds.

    LLM replies can take minutes (long prefill behind a queue, thousands of
    output tokens), so the defaults are generous.

    Attributes:
        connect_s: establishing the TCP (and TLS) connection.
        idle_s: longest silence between two reads of the response (headers or
            body bytes, keep-alive comments included).
        total_s: whole request, send to end of body.
    """

    connect_s: float = default("--connect-timeout")
    idle_s: float = default("--read-timeout")
    total_s: float = default("--request-timeout")

    def __post_init__(self) -> None:
        for name in ("connect_s", "idle_s", "total_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(
                    f"timeout {name} must be a positive number of seconds, got {value!r}; pass e.g. --read-timeout 300"
                )


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """The open-loop options checked together (``--request-rate`` … ``--max-concurrency``).

    Attributes:
        rate: requests per second over all workers (``inf`` allowed), None = closed loop.
        arrival: inter-arrival distribution, one of ``ARRIVALS``.
        burstiness: gamma shape (1 unless ``arrival`` is gamma).
        max_concurrency: cap on requests in flight over all workers, None = the number of users.
    """

    rate: float | None
    arrival: str
    burstiness: float
    max_concurrency: int | None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> OpenLoop:
        """Cross-check the parsed open-loop values (keyed by option ``dest``).

        Raises:
            ConfigError: arrival or burstiness without a rate, burstiness without gamma.
        """
        rate, arrival, burstiness = values["request_rate"], values["arrival"], values["burstiness"]
        if rate is None and (arrival or burstiness):
            raise ConfigError(
                "--arrival and --burstiness apply to open-loop runs; add --request-rate R (or inf)",
                options=tuple(f for f, v in (("--arrival", arrival), ("--burstiness", burstiness)) if v),
            )
        kind = arrival or ARRIVALS[0]
        if burstiness is not None and kind != "gamma":
            raise ConfigError(
                f"--burstiness applies to --arrival gamma, not {kind}; "
                f"pass --arrival gamma --burstiness {burstiness:g}",
                options=("--burstiness", "--arrival"),
            )
        return cls(rate, kind, _POISSON_SHAPE if burstiness is None else burstiness, values["max_concurrency"])


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Validated llmload options for one process.

    Attributes:
        model: served model name, or None to discover it from ``GET /v1/models``.
        prompt: prompt text.
        max_tokens: max_tokens per request.
        temperature: sampling temperature, None = server default.
        ignore_eos: send ``ignore_eos: true``.
        stream: stream with SSE (default True).
        api_key_env: environment variable holding the key.
        num_requests: total requests over all workers, None = unlimited.
        results_json: output path or None.
        html_report: HTML report path or None.
        tokenizer: local tokenizer path or None.
        timeouts: per-request time limits.
        api_key_file: file holding the API key (first line), or None.
        insecure: skip TLS certificate verification.
        ignore_proxy_env: connect directly whatever the proxy variables say.
        max_failure_ratio: failed/finished above this → exit status 1.
        checkpoint_interval_s: seconds between partial rewrites of ``results_json`` during the run, 0 = none.
        abort_on: ``--abort-on`` thresholds that stop the run early (``llmload.settings.thresholds``).
        max_retry_after_s: closed loop: longest pause of a user after a throttled reply.
        skip_preflight: skip the probe requests before load.
        preflight_timeout_s: longest wait for each preflight step (``-t`` bounds it too).
        requests_log: per-request JSON lines path, or None.
        timeseries: per-interval time series JSON lines path, or None.
        timeseries_interval_s: length of one time-series interval (s).
        prometheus_port: exporter port on the master, 0 = no exporter.
        prometheus_host: exporter listen address (default loopback), "" or "0.0.0.0" = all interfaces.
        prometheus_grace_s: longest wait after the run for a scrape of the final totals.
        server_metrics: ``--server-metrics``: "auto", "off", or comma-separated URLs ("auto" among them allowed).
        dataset: prompt file, or None.
        dataset_format: ``auto``, ``jsonl`` or ``sharegpt``.
        input_tokens: synthetic prompt length, or None (no synthetic prompts).
        output_tokens: max_tokens per request, or None (``--max-tokens``, or a
            dataset line's own ``max_tokens``).
        output_from_dataset: take max_tokens from the dataset (``--output-tokens dataset``).
        prefix_tokens: common prefix length in tokens, 0 = none.
        turns: conversation length per user, 1 = single-turn.
        batch_size: inputs per embeddings request (EmbeddingsUser).
        responses_history: ``client`` or ``server``: who keeps a multi-turn
            Responses conversation (``server``: ``previous_response_id``).
        seed: seed of the workload.
        allow_download: permit hub downloads of ``tokenizer``.
        slo: goodput objectives, or None.
        warmup_requests: requests sent first and excluded from statistics (all workers together).
        headers: extra ``(name, value)`` headers on every request.
        api_key_header: header that carries the API key as is, None = ``Authorization: Bearer``.
        endpoint_path: path posted to instead of the endpoint's ``/v1/...`` path, or None.
        max_tokens_field: body field of the reply length (``max_tokens`` or ``max_completion_tokens``).
        extra_body: fields merged into every request body, or None.
        stream_usage: ``auto``, ``on`` or ``off`` (ask for ``stream_options.include_usage``).
        sessions: recorded sessions to play (``llmload.workload.session_file``), or None.
        session_history: ``server`` or ``dataset``: whose assistant turns the history keeps.
        think_time: pause between a session's turns (``--think-time``), None = none.
        session_header: header carrying a per-session value (``--session-header``), or None.
        trace: timed trace to replay (``llmload.workload.trace``), or None.
        trace_format: ``auto``, ``mooncake`` or ``jsonl``.
        trace_speed: replay speed-up (gaps divided by it).
        trace_skip_bad: skip bad trace lines instead of refusing the trace.
        trace_block_tokens: tokens per ``hash_ids`` block (mooncake).
    """

    model: str | None = None
    prompt: str = default("--prompt")
    max_tokens: int = default("--max-tokens")
    temperature: float | None = None
    ignore_eos: bool = False
    stream: bool = True
    api_key_env: str = default("--api-key-env")
    num_requests: int | None = None
    results_json: str | None = None
    html_report: str | None = None
    tokenizer: str | None = None
    timeouts: Timeouts = Timeouts()
    api_key_file: str | None = None
    insecure: bool = False
    ignore_proxy_env: bool = False
    max_failure_ratio: float = default("--max-failure-ratio")
    checkpoint_interval_s: float = default("--checkpoint-interval")
    abort_on: tuple[Threshold, ...] = default("--abort-on")
    max_retry_after_s: float = default("--max-retry-after")
    skip_preflight: bool = False
    preflight_timeout_s: float = default("--preflight-timeout")
    requests_log: str | None = None
    timeseries: str | None = None
    timeseries_interval_s: float = default("--timeseries-interval")
    prometheus_port: int = default("--prometheus-port")
    prometheus_host: str = default("--prometheus-host")
    prometheus_grace_s: float = default("--prometheus-grace")
    server_metrics: str = default("--server-metrics")
    dataset: str | None = None
    dataset_format: str = default("--dataset-format")
    input_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None
    output_from_dataset: bool = False
    prefix_tokens: int = default("--prefix-tokens")
    turns: int = default("--turns")
    batch_size: int = default("--batch-size")
    responses_history: str = default("--responses-history")
    seed: int = default("--seed")
    allow_download: bool = False
    slo: SLO | None = None
    warmup_requests: int = default("--warmup-requests")
    headers: tuple[tuple[str, str], ...] = default("--header")
    api_key_header: str | None = None
    endpoint_path: str | None = None
    max_tokens_field: str = default("--max-tokens-field")
    extra_body: dict[str, Any] | None = None
    stream_usage: str = default("--stream-usage")
    sessions: str | None = None
    session_history: str = default("--session-history")
    think_time: ThinkTime | None = None
    session_header: str | None = None
    trace: str | None = None
    trace_format: str = default("--trace-format")
    trace_speed: float = default("--trace-speed")
    trace_skip_bad: bool = False
    trace_block_tokens: int = default("--trace-block-tokens")
    # open loop (None: closed loop)
    request_rate: float | None = None
    arrival: str = ARRIVALS[0]
    burstiness: float = _POISSON_SHAPE
    max_concurrency: int | None = None

    @property
    def shared_totals(self) -> tuple[str, ...]:
        """The options set in this run whose totals are split over the workers (each worker sends a share)."""
        given = (
            ("--num-requests", self.num_requests is not None and self.trace is None),  # a trace sets it
            ("--warmup-requests", self.warmup_requests > 0),
            ("--request-rate", self.request_rate is not None),
            ("--trace", self.trace is not None),
        )
        return tuple(flag for flag, used in given if used)

    @classmethod
    def from_options(cls, options: object) -> RunConfig:
        """Build from Locust's parsed options (CLI > env > locust.conf, resolved by Locust).

        Values may arrive as strings (web UI, environment); each is parsed by its
        declaration, then the rules that involve several options are applied.

        Raises:
            InvalidOptionsError: every refused value (``-H`` among them: a base URL, not an endpoint's URL),
                each naming the option, the value and an accepted example.
            ConfigError: options that conflict with each other.
        """
        values: dict[str, Any] = {}
        problems: list[tuple[str, str]] = []
        host = getattr(options, "host", None)  # Locust's -H: checked here so it joins the other refused values
        if isinstance(host, str) and host.strip():
            try:
                host_url("-H", host)
            except ConfigError as exc:
                problems.append(("-H", str(exc)))
        for spec in OPTIONS:
            try:
                values[spec.dest] = spec.value(getattr(options, spec.dest, None))
            except ConfigError as exc:
                problems.append((spec.flag, str(exc)))
        if problems:
            raise InvalidOptionsError(problems)
        direct = {spec.target: values[spec.dest] for spec in OPTIONS if spec.target is not None}
        direct["stream"] = not direct.pop("no_stream")
        loop = OpenLoop.from_values(values)
        _check_trace(values)
        return cls(
            **direct,
            timeouts=Timeouts(values["connect_timeout"], values["read_timeout"], values["request_timeout"]),
            request_rate=loop.rate,
            arrival=loop.arrival,
            burstiness=loop.burstiness,
            max_concurrency=loop.max_concurrency,
            **_lengths(values),
        )


_TRACE_CONFLICTS = (
    ("num_requests", "--num-requests", "the trace sets the requests; stop sooner with -t"),
    ("request_rate", "--request-rate", "the trace sets the send times; speed it up with --trace-speed"),
    ("dataset", "--dataset", "the trace sets the prompts"),
    ("input_tokens", "--input-tokens", "the trace sets the prompt lengths"),
)


def _check_trace(values: Mapping[str, Any]) -> None:
    """``--trace`` decides the requests, their times and prompts; options that would too are refused.

    Raises:
        ConfigError: naming the conflicting option and what to do instead.
    """
    if values["sessions"] is not None:
        for dest, flag in (("trace", "--trace"), ("dataset", "--dataset"), ("input_tokens", "--input-tokens")):
            if values.get(dest) is not None:
                raise ConfigError(
                    f"--sessions and {flag} cannot be used together: the sessions file sets the prompts",
                    options=("--sessions", flag),
                )
        if values["turns"] > 1:
            raise ConfigError(
                "--sessions and --turns cannot be used together: each session has its own steps",
                options=("--sessions", "--turns"),
            )
    if values["trace"] is None:
        return
    for dest, flag, why in _TRACE_CONFLICTS:
        if values.get(dest) is not None:
            raise ConfigError(
                f"--trace and {flag} cannot be used together: {why}; drop {flag}", options=("--trace", flag)
            )
    if values["turns"] > 1:
        raise ConfigError(
            "--trace and --turns cannot be used together: the trace sets the turns; drop --turns",
            options=("--trace", "--turns"),
        )


def _lengths(values: Mapping[str, Any]) -> dict[str, Any]:
    """Cross-check the prompt source and the input/output lengths with their spreads.

    Raises:
        ConfigError: naming the options that conflict and what to pass instead.
    """
    if values["dataset"] is not None and values["input_tokens"] is not None:
        raise ConfigError(
            "--dataset and --input-tokens both choose the prompts; pass one of them "
            "(--output-tokens sets reply lengths for either)",
            options=("--dataset", "--input-tokens"),
        )
    output = values["output_tokens"]
    from_dataset = output == "dataset"
    if from_dataset and values["dataset"] is None:
        raise ConfigError(
            "--output-tokens dataset needs --dataset PATH; or pass a number, e.g. --output-tokens 256",
            options=("--output-tokens",),
        )
    if from_dataset and values["output_tokens_stddev"] is not None:
        raise ConfigError(
            "--output-tokens-stddev needs a number for --output-tokens, not 'dataset'",
            options=("--output-tokens-stddev", "--output-tokens"),
        )
    return {
        "input_tokens": _spread("--input-tokens", values["input_tokens"], values["input_tokens_stddev"]),
        "output_tokens": None if from_dataset else _spread("--output-tokens", output, values["output_tokens_stddev"]),
        "output_from_dataset": from_dataset,
    }


def _spread(flag: str, length: LengthSpec | None, stddev: float | None) -> LengthSpec | None:
    """``length`` with its normal spread; a spread needs a fixed N, not a range."""
    if stddev is None:
        return length
    if length is None:
        raise ConfigError(
            f"{flag}-stddev needs {flag} N; pass e.g. {flag} 512 {flag}-stddev 64", options=(f"{flag}-stddev",)
        )
    if length.low is not None:
        raise ConfigError(
            f"{flag}-stddev applies to {flag} N, not to a range {f'{length.low}:{length.high}'!r}; pass one of them"
        )
    return LengthSpec(mean=length.mean, stddev=stddev)

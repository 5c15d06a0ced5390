"""Run configuration: one frozen value built once from Locust's options and validated.

Every option has exactly one documented meaning; invalid values raise
``ConfigError`` naming the value and the fix, before any load is sent.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from llmload.errors import ConfigError
from llmload.goodput import SLO, parse_slo
from llmload.options import DEFAULT_PROMPT, OPTIONS, OptionSpec

_N = TypeVar("_N", int, float)

__all__ = ["OPTIONS", "LengthSpec", "OptionSpec", "RunConfig", "Timeouts"]


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

    connect_s: float = 30.0
    idle_s: float = 300.0
    total_s: float = 1800.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "idle_s", "total_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(
                    f"timeout {name} must be a positive number of seconds, got {value!r}; pass e.g. --read-timeout 300"
                )


@dataclass(frozen=True, slots=True)
class LengthSpec:
    """A token length per request: fixed, uniform in ``[low, high]``, or normal around ``mean``.

    ``--input-tokens 512``, ``--input-tokens 256:1024`` (uniform, inclusive) or
    ``--input-tokens 512 --input-tokens-stddev 64`` (normal, rounded, at least 1).
    """

    mean: int
    stddev: float = 0.0
    low: int | None = None
    high: int | None = None

    def draw(self, rng: random.Random) -> int:
        """Return one length (tokens, >= 1) using ``rng``."""
        if self.low is not None and self.high is not None:
            return rng.randint(self.low, self.high)
        if self.stddev > 0:
            return max(1, round(rng.gauss(self.mean, self.stddev)))
        return self.mean


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
        tokenizer: local tokenizer path or None.
        timeouts: per-request time limits.
        api_key_file: file holding the API key (first line), or None.
        insecure: skip TLS certificate verification.
        max_failure_ratio: failed/finished above this → exit status 1.
        skip_preflight: skip the probe requests before load.
        requests_log: per-request JSON lines path, or None.
        prometheus_port: exporter port on the master, 0 = no exporter.
        prometheus_host: exporter listen address, "" = all interfaces.
        prometheus_grace_s: longest wait after the run for a scrape of the final totals.
        server_metrics: ``--server-metrics``: "auto", "off", or comma-separated URLs (with "auto" among them allowed).
        dataset: prompt file, or None.
        dataset_format: ``auto``, ``jsonl`` or ``sharegpt``.
        input_tokens: synthetic prompt length, or None (no synthetic prompts).
        output_tokens: max_tokens per request, or None (``--max-tokens``, or a
            dataset line's own ``max_tokens``).
        output_from_dataset: take max_tokens from the dataset (``--output-tokens dataset``).
        prefix_tokens: common prefix length in tokens, 0 = none.
        turns: conversation length per user, 1 = single-turn.
        seed: seed of the workload.
        allow_download: permit hub downloads of ``tokenizer``.
        slo: goodput objectives, or None.
        warmup_requests: requests sent first and excluded from statistics (all workers together).
    """

    model: str | None = None
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 128
    temperature: float | None = None
    ignore_eos: bool = False
    stream: bool = True
    api_key_env: str = "OPENAI_API_KEY"
    num_requests: int | None = None
    results_json: str | None = None
    tokenizer: str | None = None
    timeouts: Timeouts = Timeouts()
    api_key_file: str | None = None
    insecure: bool = False
    max_failure_ratio: float = 0.01
    skip_preflight: bool = False
    requests_log: str | None = None
    prometheus_port: int = 9646
    prometheus_host: str = ""
    prometheus_grace_s: float = 60.0
    server_metrics: str = "auto"
    dataset: str | None = None
    dataset_format: str = "auto"
    input_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None
    output_from_dataset: bool = False
    prefix_tokens: int = 0
    turns: int = 1
    seed: int = 0
    allow_download: bool = False
    slo: SLO | None = None
    warmup_requests: int = 0
    # open loop (None: closed loop)
    request_rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None

    @classmethod
    def from_options(cls, options: object) -> RunConfig:
        """Build from Locust's parsed options (CLI > env > locust.conf, resolved by Locust).

        Values may arrive as strings (web UI, environment); each is validated here.

        Raises:
            ConfigError: naming the option, the value and an accepted example.
        """

        def get(name: str) -> object:
            return getattr(options, name, None)

        model = _text(get("model"))
        prompt = _text(get("prompt"))
        if prompt is None:
            raise ConfigError("--prompt must not be empty; pass e.g. --prompt 'Tell me a joke'")
        config = cls(
            model=model,
            prompt=prompt,
            max_tokens=_positive_int("--max-tokens", get("max_tokens"), required=True) or 0,
            temperature=_non_negative_float("--temperature", get("temperature")),
            ignore_eos=_flag(get("ignore_eos")),
            stream=not _flag(get("no_stream")),
            api_key_env=_text(get("api_key_env")) or "OPENAI_API_KEY",
            num_requests=_positive_int("--num-requests", get("num_requests"), required=False),
            results_json=_text(get("results_json")),
            tokenizer=_text(get("tokenizer")),
            timeouts=Timeouts(
                connect_s=_seconds("--connect-timeout", get("connect_timeout"), 30.0),
                idle_s=_seconds("--read-timeout", get("read_timeout"), 300.0),
                total_s=_seconds("--request-timeout", get("request_timeout"), 1800.0),
            ),
            api_key_file=_text(get("api_key_file")),
            insecure=_flag(get("insecure")),
            max_failure_ratio=_ratio("--max-failure-ratio", get("max_failure_ratio"), 0.01),
            skip_preflight=_flag(get("skip_preflight")),
            requests_log=_text(get("requests_log")),
            prometheus_port=_port("--prometheus-port", get("prometheus_port"), 9646),
            prometheus_host=(_text(get("prometheus_host")) or "").strip(),
            prometheus_grace_s=_grace_s("--prometheus-grace", get("prometheus_grace"), 60.0),
            server_metrics=parse_server_metrics(get("server_metrics")),
            **_open_loop(get),
        )
        return _with_workload(config, get)


def parse_server_metrics(raw: object) -> str:
    """Validate ``--server-metrics``: ``auto``, ``off``, or comma-separated http(s) URLs (``auto`` among them allowed).

    Returns the setting normalised (no spaces); None or empty is ``auto``.

    Raises:
        ConfigError: naming the bad part and an accepted example.
    """
    text = "" if raw is None else str(raw).strip()
    parts = [p.strip() for p in text.split(",") if p.strip()] or ["auto"]
    if "off" in parts and len(parts) > 1:
        raise ConfigError(f"--server-metrics {text!r}: 'off' cannot be combined with other entries; pass off alone")
    for part in parts:
        if part in ("auto", "off"):
            continue
        split = urlsplit(part)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise ConfigError(
                f"--server-metrics: {part!r} is not auto, off or an http(s) URL; "
                "pass e.g. --server-metrics auto,http://gpu-host:9400/metrics"
            )
    return ",".join(parts)


ARRIVALS = ("poisson", "constant", "gamma")


def parse_rate(raw: str) -> float:
    """Parse ``--request-rate``: a positive number of requests per second, or ``inf``.

    Raises:
        ConfigError: zero, negative, NaN or non-numeric values, naming the accepted forms.
    """
    text = raw.strip().lower()
    if text == "inf":
        return math.inf
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0) or math.isinf(value):
        raise ConfigError(
            f"--request-rate must be a positive number of requests per second or inf, got {raw!r}; pass e.g. "
            "--request-rate 20, or --request-rate inf for unlimited (0 and negative values are refused)"
        )
    return value


def _open_loop(get: Callable[[str], object]) -> dict[str, Any]:
    """Validate --request-rate, --arrival, --burstiness, --max-concurrency together."""
    raw_rate = _text(get("request_rate"))
    rate = None if raw_rate is None else parse_rate(raw_rate)
    arrival = _text(get("arrival"))
    burstiness = _text(get("burstiness"))
    if rate is None and (arrival or burstiness):
        raise ConfigError("--arrival and --burstiness apply to open-loop runs; add --request-rate R (or inf)")
    if arrival is not None and arrival.lower() not in ARRIVALS:
        raise ConfigError(
            f"--arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}; pass e.g. --arrival poisson"
        )
    kind = (arrival or "poisson").lower()
    shape = 1.0
    if burstiness is not None:
        if kind != "gamma":
            raise ConfigError(
                f"--burstiness applies to --arrival gamma, not {kind}; pass --arrival gamma --burstiness {burstiness}"
            )
        try:
            shape = float(burstiness)
        except ValueError:
            shape = math.nan
        if not shape > 0 or math.isinf(shape):
            raise ConfigError(
                f"--burstiness must be a finite number > 0, got {burstiness!r}; pass e.g. --burstiness 0.5"
            )
    if _text(get("max_concurrency")) == "0":
        raise ConfigError(
            "--max-concurrency must be a positive integer, got 0; leave it unset for no cap (0 never means unlimited)"
        )
    return {
        "request_rate": rate,
        "arrival": kind,
        "burstiness": shape,
        "max_concurrency": _positive_int("--max-concurrency", get("max_concurrency"), required=False),
    }


def _text(raw: object) -> str | None:
    if raw is None:
        return None
    text = str(raw)
    return text if text.strip() else None


def _flag(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if raw is None:
        return False
    return str(raw).strip().lower() in ("1", "true", "yes", "on")


def _positive_int(flag: str, raw: object, *, required: bool) -> int | None:
    text = _text(raw)
    if text is None:
        if required:
            raise ConfigError(f"{flag} is required; pass e.g. {flag} 128")
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{flag} must be a positive integer, got {text!r}; pass e.g. {flag} 300") from None
    if value <= 0:
        hint = " Leave it unset for no limit." if not required else ""
        raise ConfigError(f"{flag} must be a positive integer, got {value}.{hint} Pass e.g. {flag} 300")
    return value


def _number(
    flag: str,
    raw: object,
    default: _N,
    *,
    convert: Callable[[str], _N],
    valid: Callable[[_N], bool],
    requirement: str,
    example: str,
) -> _N:
    """Parse one numeric option; unset gives ``default``.

    Raises:
        ConfigError: ``{flag} must be {requirement}, got {value!r}; pass e.g. {flag} {example}``.
    """
    text = _text(raw)
    if text is None:
        return default
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise ConfigError(f"{flag} must be {requirement}, got {text!r}; pass e.g. {flag} {example}")
    return value


def _non_negative_float(flag: str, raw: object) -> float | None:
    if _text(raw) is None:
        return None
    return _number(
        flag, raw, 0.0, convert=float, valid=lambda v: 0 <= v < math.inf, requirement="a finite number >= 0",
        example="0.7",
    )  # fmt: skip


def _ratio(flag: str, raw: object, default: float) -> float:
    return _number(
        flag, raw, default, convert=float, valid=lambda v: 0.0 <= v <= 1.0, requirement="a number from 0 to 1",
        example="0.01",
    )  # fmt: skip


def _port(flag: str, raw: object, default: int) -> int:
    """A TCP port number, 0..65535 (0 means "off" for the exporter)."""
    return _number(
        flag, raw, default, convert=int, valid=lambda v: 0 <= v <= 65535,
        requirement="a port number from 0 to 65535 (0: off)", example="9646",
    )  # fmt: skip


def _grace_s(flag: str, raw: object, default: float) -> float:
    value = _non_negative_float(flag, raw)
    return default if value is None else value


def _seconds(flag: str, raw: object, default: float) -> float:
    return _number(
        flag, raw, default, convert=float, valid=lambda v: 0 < v < math.inf,
        requirement="a finite number of seconds > 0", example="60",
    )  # fmt: skip


# ── workloads (issue 3) ─────────────────────────────────────────────────────
_DATASET_FORMATS = ("auto", "jsonl", "sharegpt")


def _with_workload(config: RunConfig, get: Callable[[str], object]) -> RunConfig:
    """Parse and cross-check the workload options (``--dataset`` … ``--warmup-requests``).

    Raises:
        ConfigError: naming the option, the value and an accepted example.
    """
    dataset = _text(get("dataset"))
    fmt = (_text(get("dataset_format")) or "auto").strip().lower()
    if fmt not in _DATASET_FORMATS:
        raise ConfigError(f"--dataset-format must be one of {', '.join(_DATASET_FORMATS)}, got {fmt!r}")
    input_tokens = _length("--input-tokens", get("input_tokens"), get("input_tokens_stddev"))
    if dataset is not None and input_tokens is not None:
        raise ConfigError(
            "--dataset and --input-tokens both choose the prompts; pass one of them "
            "(--output-tokens sets reply lengths for either)"
        )
    raw_output = _text(get("output_tokens"))
    from_dataset = raw_output is not None and raw_output.strip().lower() == "dataset"
    if from_dataset and dataset is None:
        raise ConfigError("--output-tokens dataset needs --dataset PATH; or pass a number, e.g. --output-tokens 256")
    output_tokens = None if from_dataset else _length("--output-tokens", raw_output, get("output_tokens_stddev"))
    if from_dataset and _text(get("output_tokens_stddev")) is not None:
        raise ConfigError("--output-tokens-stddev needs a number for --output-tokens, not 'dataset'")
    slo_text = _text(get("slo"))
    return dataclasses.replace(
        config,
        dataset=dataset,
        dataset_format=fmt,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        output_from_dataset=from_dataset,
        prefix_tokens=_count_option("--prefix-tokens", get("prefix_tokens"), minimum=0, example="256"),
        turns=_count_option("--turns", get("turns"), minimum=1, example="4"),
        seed=_seed(get("seed")),
        allow_download=_flag(get("allow_download")),
        slo=parse_slo(slo_text) if slo_text is not None else None,
        warmup_requests=_count_option("--warmup-requests", get("warmup_requests"), minimum=0, example="20"),
    )


def _count_option(flag: str, raw: object, *, minimum: int, example: str) -> int:
    text = _text(raw)
    if text is None:
        return minimum
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{flag} must be an integer >= {minimum}, got {text!r}; pass e.g. {flag} {example}")
    return value


def _seed(raw: object) -> int:
    text = _text(raw)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"--seed must be an integer, got {text!r}; pass e.g. --seed 42") from None


def _length(flag: str, raw: object, raw_stddev: object) -> LengthSpec | None:
    """``N`` or ``MIN:MAX`` (positive integers), with an optional normal stddev for ``N``."""
    text = _text(raw)
    stddev_text = _text(raw_stddev)
    if text is None:
        if stddev_text is not None:
            raise ConfigError(f"{flag}-stddev needs {flag} N; pass e.g. {flag} 512 {flag}-stddev 64")
        return None
    low_text, sep, high_text = text.strip().partition(":")
    try:
        low, high = int(low_text), int(high_text) if sep else None
    except ValueError:
        low, high = 0, None
    if low < 1 or (high is not None and high < low):
        raise ConfigError(
            f"{flag} must be a positive integer N or a range MIN:MAX with 1 <= MIN <= MAX, got {text!r}; "
            f"pass e.g. {flag} 512 or {flag} 256:1024"
        )
    if high is not None:
        if stddev_text is not None:
            raise ConfigError(f"{flag}-stddev applies to {flag} N, not to a range {text!r}; pass one of them")
        return LengthSpec(mean=(low + high) // 2, low=low, high=high)
    stddev = 0.0
    if stddev_text is not None:
        try:
            stddev = float(stddev_text)
        except ValueError:
            stddev = -1.0
        if not (stddev >= 0 and math.isfinite(stddev)):
            raise ConfigError(
                f"{flag}-stddev must be a number of tokens >= 0, got {stddev_text!r}; pass e.g. {flag}-stddev 64"
            )
    return LengthSpec(mean=low, stddev=stddev)

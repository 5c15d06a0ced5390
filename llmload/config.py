"""Run configuration: one frozen value built once from Locust's options and validated.

Every option has exactly one documented meaning; invalid values raise
``ConfigError`` naming the value and the fix, before any load is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.errors import ConfigError

__all__ = ["OPTIONS", "OptionSpec", "RunConfig", "Timeouts"]


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
                    f"timeout {name} must be a positive number of seconds, got {value!r}; "
                    "pass e.g. --read-timeout 300"
                )


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One llmload command-line option, registered on Locust's parser by ``hooks``.

    Also readable from ``locust.conf`` (key = long flag without dashes) and from
    the environment variable ``env`` (``LOCUST_`` prefix, like Locust's own).
    """

    flag: str
    help: str
    default: object = None
    metavar: str | None = None
    is_flag: bool = False
    is_secret: bool = False

    @property
    def dest(self) -> str:
        """The attribute name on Locust's parsed options."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable that sets this option."""
        return "LOCUST_" + self.dest.upper()


DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "--model",
        "Served model name sent in each request. Default: the first model "
        "listed by GET /v1/models. Never used to find a tokenizer.",
        metavar="NAME",
    ),
    OptionSpec("--prompt", "Prompt text sent in every request.", DEFAULT_PROMPT, metavar="TEXT"),
    OptionSpec("--max-tokens", "max_tokens per request (positive integer).", 128, metavar="N"),
    OptionSpec("--temperature", "Sampling temperature (>= 0). Default: the server's default.", metavar="T"),
    OptionSpec(
        "--ignore-eos",
        "Send ignore_eos=true so every reply has exactly max_tokens (vLLM/SGLang/llama.cpp extension).",
        False,
        is_flag=True,
    ),
    OptionSpec(
        "--no-stream",
        "Send non-streaming requests (TTFT then equals E2E and is not reported).",
        False,
        is_flag=True,
    ),
    OptionSpec(
        "--api-key-env",
        "Name of the environment variable that holds the API key "
        "(sent as 'Authorization: Bearer'). Unset or empty variable: no key sent.",
        "OPENAI_API_KEY",
        metavar="VAR",
    ),
    OptionSpec(
        "--num-requests",
        "Send exactly N requests over all workers together; the run ends "
        "when all N have finished. Empty: no request limit (use -t).",
        "",
        metavar="N",
    ),
    OptionSpec("--results-json", "Write the end-of-run results to this JSON file.", "", metavar="PATH"),
    OptionSpec(
        "--tokenizer",
        "Local tokenizer directory (transformers AutoTokenizer) used only "
        "when the server sends no usage. Never downloaded.",
        "",
        metavar="PATH",
    ),
    OptionSpec("--connect-timeout", "Seconds to establish a connection.", 30.0, metavar="S"),
    OptionSpec(
        "--read-timeout", "Longest silence in seconds between two reads of a reply.", 300.0, metavar="S"
    ),
    OptionSpec("--request-timeout", "Longest total time in seconds for one request.", 1800.0, metavar="S"),
    OptionSpec("--api-key-file", "File whose first line is the API key (instead of --api-key-env).",
               "", metavar="PATH"),
    OptionSpec("--insecure", "Do not verify the server's TLS certificate (printed as a warning).",
               False, is_flag=True),
    OptionSpec("--max-failure-ratio", "Exit with status 1 when failed / finished requests exceed this "
               "ratio (0..1).", 0.01, metavar="R"),
    OptionSpec("--skip-preflight", "Do not probe the server before load (GET /v1/models is still used "
               "to find the model when --model is not given).", False, is_flag=True),
    OptionSpec("--requests-log", "Stream one JSON line per finished request to PATH (each worker "
               "writes PATH with its worker index inserted before the extension).", "", metavar="PATH"),
    # ── Prometheus exporter (issue 5) ──
    OptionSpec(
        "--prometheus-port",
        "Serve Prometheus metrics at /metrics on this port on the master (or the single "
        "process); workers serve nothing. 0 disables the exporter.",
        9646,
        metavar="PORT",
    ),
    OptionSpec(
        "--prometheus-host", "Address the Prometheus exporter listens on. Empty: all interfaces.", "",
        metavar="ADDR",
    ),
    OptionSpec(
        "--prometheus-grace",
        "After the run, keep /metrics up at most S seconds until one scrape has read the final "
        "totals. No wait when nothing has scraped /metrics yet.",
        60.0,
        metavar="S",
    ),
)


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
        return cls(
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
        )


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


def _non_negative_float(flag: str, raw: object) -> float | None:
    text = _text(raw)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} must be a number >= 0, got {text!r}; pass e.g. {flag} 0.7") from None
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{flag} must be a finite number >= 0, got {text!r}; pass e.g. {flag} 0.7")
    return value


def _ratio(flag: str, raw: object, default: float) -> float:
    text = _text(raw)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(
            f"{flag} must be a number from 0 to 1, got {text!r}; pass e.g. {flag} 0.01"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{flag} must be a number from 0 to 1, got {text!r}; pass e.g. {flag} 0.01")
    return value


def _port(flag: str, raw: object, default: int) -> int:
    """A TCP port number, 0..65535 (0 means "off" for the exporter)."""
    text = _text(raw)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise ConfigError(
            f"{flag} must be a port number from 0 to 65535 (0: off), got {text!r}; pass e.g. {flag} 9646"
        )
    return value


def _grace_s(flag: str, raw: object, default: float) -> float:
    value = _non_negative_float(flag, raw)
    return default if value is None else value


def _seconds(flag: str, raw: object, default: float) -> float:
    text = _text(raw)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(
            f"{flag} must be a number of seconds > 0, got {text!r}; pass e.g. {flag} 60"
        ) from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{flag} must be a finite number of seconds > 0, got {text!r}; pass e.g. {flag} 60")
    return value

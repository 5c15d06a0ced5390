"""llmload's options, each declared once: flag, help, default, parser, choices, group, env var.

The table ``OPTIONS`` feeds Locust's parser (``llmload.edge.hooks``: CLI,
``locust.conf``, ``LOCUST_*`` environment, the web UI form in this order),
``RunConfig.from_options`` (``llmload.settings.config``) and ``llmload options``
(``describe``). Adding an option is one ``OptionSpec`` here plus its use.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from llmload.settings import option_values as v
from llmload.settings.header_values import header_name, headers
from llmload.settings.option_values import OptionSpec
from llmload.settings.think_time import parse_think_time

__all__ = ["DEFAULT_PROMPT", "GROUPS", "OPTIONS", "OptionSpec", "default", "describe"]

_MODEL, _REPLY, _LOAD, _DETAILS = "Model and prompt", "Reply length and sampling", "Load", "Workload details"
_SERVER, _TOKENS, _RESULTS, _PROM = "Server and connection", "Tokens and goodput", "Results", "Prometheus exporter"
GROUPS = (_MODEL, _REPLY, _LOAD, _DETAILS, _SERVER, _TOKENS, _RESULTS, _PROM)
"""Option groups in the order of ``llmload options`` and of the web UI form."""


def _switch(flag: str, help: str, group: str, label: str, shown: str = "") -> OptionSpec:
    return OptionSpec(flag, help, group, False, v.flag, is_flag=True, label=label, shown=shown)


DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

_SECONDS = v.number(float, lambda x: 0 < x < math.inf, "a finite number of seconds > 0", "60")
_NON_NEGATIVE = v.number(float, lambda x: 0 <= x < math.inf, "a finite number >= 0", "0.7")
_TOKENS_STDDEV = v.number(float, lambda x: 0 <= x < math.inf, "a number of tokens >= 0", "64")
_UNSET_NO_LIMIT = "Leave it unset for no limit."
_NOT_WRITTEN = "not written"


def _at_least(minimum: int, example: str) -> v.Parse:
    return v.number(int, lambda x: x >= minimum, f"an integer >= {minimum}", example)


OPTIONS: tuple[OptionSpec, ...] = (
    # ── model and prompt ──
    OptionSpec(
        "--model",
        "Served model name sent in each request; checked against GET /v1/models before any load. "
        "Never used to find a tokenizer.",
        _MODEL,
        metavar="NAME",
        shown="the first model GET /v1/models lists",
        label="Model",
    ),
    OptionSpec(
        "--prompt",
        "Prompt text sent in every request.",
        _MODEL,
        DEFAULT_PROMPT,
        metavar="TEXT",
        shown=f'"{DEFAULT_PROMPT}"',
        if_unset="--prompt must not be empty; pass e.g. --prompt 'Tell me a joke'",
        label="Prompt",
    ),
    OptionSpec(
        "--dataset",
        'Prompt file: JSONL lines with "prompt" or chat "messages" (optional per-line '
        '"max_tokens"), or ShareGPT JSON. Replaces --prompt.',
        _MODEL,
        parse=v.readable_file,
        metavar="PATH",
        label="Dataset file",
    ),
    OptionSpec(
        "--dataset-format",
        "Format of --dataset: auto, jsonl or sharegpt.",
        _MODEL,
        "auto",
        v.choice("auto", "jsonl", "sharegpt"),
        metavar="FORMAT",
        choices=("auto", "jsonl", "sharegpt"),
        shown="auto (.json or a leading [: ShareGPT)",
        label="Dataset format",
    ),
    OptionSpec(
        "--input-tokens",
        "Synthetic prompts of N tokens (exact with --tokenizer, approximate without), or MIN:MAX "
        "(uniform). Replaces --prompt.",
        _MODEL,
        parse=v.length(),
        metavar="N",
        field=None,
        label="Input tokens (prompt length)",
    ),
    OptionSpec(
        "--input-tokens-stddev",
        "Normal spread of --input-tokens N (tokens).",
        _MODEL,
        parse=_TOKENS_STDDEV,
        metavar="S",
        field=None,
        shown="0",
        label="Input tokens std. dev.",
    ),
    # ── reply length and sampling ──
    OptionSpec(
        "--max-tokens",
        "max_tokens per request (positive integer).",
        _REPLY,
        128,
        v.positive_int(),
        metavar="N",
        if_unset="--max-tokens is required; pass e.g. --max-tokens 128",
        label="Max tokens (reply length)",
    ),
    OptionSpec(
        "--output-tokens",
        "max_tokens per request: M, MIN:MAX (uniform), or 'dataset' (the dataset's per-line "
        "max_tokens or ShareGPT reply length). Overrides --max-tokens.",
        _REPLY,
        parse=v.length(keyword="dataset"),
        metavar="M",
        field=None,
        shown="--max-tokens (or a JSONL line's own max_tokens)",
        label="Output tokens (reply length, overrides max tokens)",
    ),
    OptionSpec(
        "--output-tokens-stddev",
        "Normal spread of --output-tokens M (tokens).",
        _REPLY,
        parse=_TOKENS_STDDEV,
        metavar="S",
        field=None,
        shown="0",
        label="Output tokens std. dev.",
    ),
    OptionSpec(
        "--temperature",
        "Sampling temperature (>= 0).",
        _REPLY,
        parse=_NON_NEGATIVE,
        metavar="T",
        shown="the server's default (not sent)",
        label="Temperature",
    ),
    _switch(
        "--ignore-eos",
        "Send ignore_eos=true so every reply has exactly max_tokens (vLLM/SGLang/llama.cpp extension).",
        _REPLY,
        label="Ignore EOS (every reply max tokens long)",
    ),
    _switch(
        "--no-stream",
        "Send non-streaming requests (TTFT and ITL are then unknown).",
        _REPLY,
        label="Non-streaming requests",
        shown="off: streaming",
    ),
    OptionSpec(
        "--stream-usage",
        "Ask for stream_options.include_usage (token counts from the server). auto: ask, and when the "
        "server refuses the field (HTTP 400/422 naming stream_options) send that request once more without "
        "it and stop asking on that endpoint; on: always ask; off: never ask (counts from --tokenizer or chunks).",
        _REPLY,
        "auto",
        v.choice("auto", "on", "off"),
        "MODE",
        choices=("auto", "on", "off"),
        label="Ask for usage in the stream",
    ),
    OptionSpec(
        "--max-tokens-field",
        "Body field that carries the reply length: max_tokens or max_completion_tokens.",
        _REPLY,
        "max_tokens",
        v.choice("max_tokens", "max_completion_tokens"),
        "FIELD",
        choices=("max_tokens", "max_completion_tokens"),
        label="Reply-length field name",
    ),
    OptionSpec(
        "--extra-body",
        "JSON object merged into every request body (sampling parameters, chat_template_kwargs, vendor "
        "fields). Keys set by other options, n or best_of above 1 and echo are refused.",
        _REPLY,
        parse=v.extra_body,
        metavar="JSON",
        label="Extra request body (JSON)",
    ),
    # ── load ──
    OptionSpec(
        "--num-requests",
        "Send exactly N requests over all workers together; the run ends when all N have finished "
        "(succeeded or failed), or when -t elapses first.",
        _LOAD,
        parse=v.positive_int(unset_means=_UNSET_NO_LIMIT),
        metavar="N",
        shown="no limit",
        label="Number of requests",
    ),
    OptionSpec(
        "--request-rate",
        "Open loop: send R requests per second over all workers together "
        "(a positive number, or inf: every request eligible at once, bounded by --max-concurrency "
        "and users; 0 and negative values are refused). Not set: closed loop, each user sends its next "
        "request when the last ends.",
        _LOAD,
        parse=v.rate,
        metavar="R",
        field=None,
        shown="not set: closed loop",
        label="Request rate (req/s, open loop)",
    ),
    OptionSpec(
        "--arrival",
        "Inter-arrival distribution with --request-rate: poisson, constant or gamma.",
        _LOAD,
        parse=v.choice("poisson", "constant", "gamma"),
        metavar="KIND",
        choices=("", "poisson", "constant", "gamma"),
        field=None,
        shown="poisson (with --request-rate)",
        label="Arrival distribution",
    ),
    OptionSpec(
        "--burstiness",
        "Gamma shape with --arrival gamma (1 = Poisson, < 1 burstier, > 1 more regular).",
        _LOAD,
        parse=v.number(float, lambda x: 0 < x < math.inf, "a finite number > 0", "0.5"),
        metavar="B",
        field=None,
        shown="1 (with --arrival gamma)",
        label="Burstiness (gamma shape)",
    ),
    OptionSpec(
        "--max-concurrency",
        "Cap on requests in flight over all workers together (positive integer; split across workers).",
        _LOAD,
        parse=v.positive_int(
            unset_means="Leave it unset for no cap beyond the users.",
            zero="leave it unset for no cap beyond the users (0 never means unlimited)",
            example="64",
        ),
        metavar="N",
        field=None,
        shown="the number of users",
        label="Max concurrency (requests in flight)",
    ),
    OptionSpec(
        "--warmup-requests",
        "Send K requests first (over all workers) and leave them out of every statistic.",
        _LOAD,
        0,
        _at_least(0, "20"),
        metavar="K",
        label="Warm-up requests (not measured)",
    ),
    OptionSpec(
        "--max-retry-after",
        "Closed loop: longest pause in seconds a user makes after a throttled reply (429/503), "
        "whether the server's Retry-After (plus 0-10% jitter) asked for more or it sent none "
        "(exponential back-off from 1 s).",
        _LOAD,
        60.0,
        _SECONDS,
        "S",
        field="max_retry_after_s",
        label="Longest throttling pause (s)",
    ),
    # ── workload details ──
    OptionSpec(
        "--prefix-tokens",
        "Common prefix of K tokens at the start of every conversation (prefix caching).",
        _DETAILS,
        0,
        _at_least(0, "256"),
        metavar="K",
        label="Shared prefix (tokens)",
    ),
    OptionSpec(
        "--turns",
        "Multi-turn: each user's conversation lasts T turns; each turn sends the conversation so far (earlier "
        "prompts and replies) plus a new prompt (chat: as messages; completions: joined into one prompt text); "
        "after T turns, or a failed turn, it starts a new one.",
        _DETAILS,
        1,
        _at_least(1, "4"),
        metavar="T",
        label="Turns per conversation",
    ),
    OptionSpec(
        "--batch-size",
        "EmbeddingsUser: inputs per /v1/embeddings request (the next B prompts of the workload); "
        "the reply must carry B vectors.",
        _DETAILS,
        1,
        _at_least(1, "16"),
        metavar="B",
        label="Embeddings batch size",
    ),
    OptionSpec(
        "--responses-history",
        "ResponsesUser with --turns: client (send the whole conversation as input items) or server (send only "
        "the new turn with previous_response_id; the server keeps the history).",
        _DETAILS,
        "client",
        v.choice("client", "server"),
        metavar="WHERE",
        choices=("client", "server"),
        label="Responses history kept by",
    ),
    OptionSpec(
        "--trace",
        "Replay a timed trace: one request per line, sent at the line's time "
        "(see docs/guides/traces-sessions.md#replaying-traffic). "
        "The run ends when the trace does (or at -t); every line is sent once over all workers.",
        _DETAILS,
        parse=v.readable_file,
        metavar="PATH",
        label="Trace file (timed replay)",
    ),
    OptionSpec(
        "--trace-format",
        "Format of --trace: mooncake (timestamp ms, input_length, output_length, hash_ids) or jsonl "
        "(offset_s or timestamp_ms, then input_tokens/output_tokens or prompt/messages and max_tokens).",
        _DETAILS,
        "auto",
        v.choice("auto", "mooncake", "jsonl"),
        metavar="FORMAT",
        choices=("auto", "mooncake", "jsonl"),
        shown="auto (hash_ids or input_length on the first line: mooncake)",
        label="Trace format",
    ),
    OptionSpec(
        "--trace-speed",
        "Replay the trace X times faster (2 = half the gaps, 0.5 = twice the gaps).",
        _DETAILS,
        1.0,
        v.number(float, lambda x: 0 < x < math.inf, "a finite number > 0", "2"),
        metavar="X",
        label="Trace speed-up",
    ),
    _switch(
        "--trace-skip-bad",
        "Skip bad trace lines (counted and reported) instead of refusing the trace before any load.",
        _DETAILS,
        "Skip bad trace lines",
    ),
    OptionSpec(
        "--trace-block-tokens",
        "Tokens per hash_ids block of a mooncake trace (Mooncake's traces use 512).",
        _DETAILS,
        512,
        _at_least(1, "512"),
        metavar="N",
        label="Trace block size (tokens)",
    ),
    OptionSpec(
        "--sessions",
        "Sessions file: recorded chats or agentic sessions (tool calls, tool results, delays), one per JSON "
        "line; each user plays one session at a time, its steps in order "
        "(see docs/guides/traces-sessions.md#sessions).",
        _DETAILS,
        parse=v.readable_file,
        metavar="PATH",
        label="Sessions file",
    ),
    OptionSpec(
        "--session-history",
        "With --sessions: the assistant turns kept in the history: server (the replies received) or dataset "
        "(the file's recorded assistant replies, where a step has one).",
        _DETAILS,
        "server",
        v.choice("server", "dataset"),
        metavar="FROM",
        choices=("server", "dataset"),
        label="Session history from",
    ),
    OptionSpec(
        "--think-time",
        "Multi-turn (--turns): pause between a session's turns, in seconds: S, exp:MEAN, uniform:MIN:MAX "
        "or normal:MEAN:SD.",
        _DETAILS,
        parse=parse_think_time,
        metavar="S",
        shown="0 (the next turn at once)",
        label="Think time between turns (s)",
    ),
    OptionSpec(
        "--session-header",
        "Multi-turn (--turns): send this header on every request, with a value unique to its session "
        "(session affinity, e.g. X-Session-ID).",
        _DETAILS,
        parse=header_name,
        metavar="NAME",
        label="Session header",
    ),
    OptionSpec(
        "--seed",
        "Seed of prompt order, synthetic text and lengths (integer).",
        _DETAILS,
        0,
        v.number(int, lambda _x: True, "an integer", "42"),
        metavar="N",
        label="Seed",
    ),
    # ── server and connection ──
    OptionSpec(
        "--api-key-env",
        "Name of the environment variable that holds the API key "
        "(sent as 'Authorization: Bearer'; never printed or written). Unset or empty variable: no key sent.",
        _SERVER,
        "OPENAI_API_KEY",
        metavar="VAR",
        label="API key environment variable",
    ),
    OptionSpec(
        "--api-key-file",
        "File whose first line is the API key (instead of --api-key-env; an empty first line is refused).",
        _SERVER,
        metavar="PATH",
        shown="not used",
        label="API key file",
    ),
    _switch(
        "--insecure",
        "Do not verify the server's TLS certificate (printed as a warning).",
        _SERVER,
        shown="off: certificates verified",
        label="Skip TLS certificate check",
    ),
    OptionSpec(
        "--header",
        "Extra HTTP header 'Name: value' on every request; repeat the option for several. locust.conf: "
        "header = [api-key: KEY, x-trace: on]; LOCUST_HEADER: one header per line. Values of credential "
        "headers are never printed. Refused: framing headers (Content-Length, Transfer-Encoding, Host, "
        "Connection ...) and a CR or other control character in a value (a line feed starts another header).",
        _SERVER,
        (),
        headers,
        "'NAME: VALUE'",
        is_secret=True,
        repeatable=True,
        field="headers",
        label="Extra HTTP headers",
    ),
    OptionSpec(
        "--api-key-header",
        "Send the API key as 'NAME: KEY' instead of 'Authorization: Bearer KEY' (gateways: api-key, x-api-key); "
        "the key is never printed or written.",
        _SERVER,
        parse=header_name,
        metavar="NAME",
        shown="Authorization: Bearer",
        label="API key header name",
    ),
    OptionSpec(
        "--endpoint-path",
        "POST to this path (after -H's own path) instead of /v1/chat/completions or /v1/completions, "
        "for servers without the /v1/... layout; a query string in -H is kept.",
        _SERVER,
        parse=v.endpoint_path,
        metavar="PATH",
        shown="/v1/chat/completions or /v1/completions",
        label="Endpoint path",
    ),
    _switch(
        "--ignore-proxy-env",
        "Connect to the target directly even when HTTP_PROXY / HTTPS_PROXY / ALL_PROXY are set.",
        _SERVER,
        shown="off: proxy variables honoured",
        label="Ignore proxy environment variables",
    ),
    OptionSpec(
        "--connect-timeout",
        "Seconds to establish a connection.",
        _SERVER,
        30.0,
        _SECONDS,
        "S",
        field=None,
        label="Connect timeout (s)",
    ),
    OptionSpec(
        "--read-timeout",
        "Longest silence in seconds between two reads of a reply (keep-alive comments count as data).",
        _SERVER,
        300.0,
        _SECONDS,
        "S",
        field=None,
        label="Read timeout (s)",
    ),
    OptionSpec(
        "--request-timeout",
        "Longest total time in seconds for one request.",
        _SERVER,
        1800.0,
        _SECONDS,
        "S",
        field=None,
        label="Request timeout (s)",
    ),
    OptionSpec(
        "--preflight-timeout",
        "Longest wait in seconds for each preflight step (GET /v1/models, the probe requests) before any load; "
        "-t bounds it too. A server that does not answer within it stops the run with a line saying so.",
        _SERVER,
        30.0,
        _SECONDS,
        "S",
        field="preflight_timeout_s",
        label="Preflight timeout (s)",
    ),
    _switch(
        "--skip-preflight",
        "Skip the probe requests before load (GET /v1/models still runs).",
        _SERVER,
        shown="off: preflight on",
        label="Skip preflight probe",
    ),
    OptionSpec(
        "--server-metrics",
        "Scrape the inference server's Prometheus metrics during the run (master only): "
        "auto = the target's /metrics if it answers Prometheus text; off; or URLs, comma-separated "
        "(auto may be one of them, e.g. auto,http://gpu-host:9400/metrics for a DCGM exporter).",
        _SERVER,
        "auto",
        v.server_metrics,
        "auto|off|URL[,URL...]",
        label="Server metrics to scrape",
    ),
    # ── tokens and goodput ──
    OptionSpec(
        "--tokenizer",
        "Tokenizer (transformers AutoTokenizer): a local directory, a tokenizer.json file, or a "
        "hub id already in the local cache (downloaded only with --allow-download). Counts tokens "
        "when the server sends no usage and makes synthetic prompts exact. Never taken from --model.",
        _TOKENS,
        metavar="PATH_OR_NAME",
        shown="none: counts from server usage",
        label="Tokenizer",
    ),
    _switch(
        "--allow-download",
        "Let --tokenizer download from the Hugging Face hub (off: local files and cache only).",
        _TOKENS,
        shown="off: no hub request at all",
        label="Allow tokenizer download",
    ),
    OptionSpec(
        "--slo",
        "Service-level objectives in seconds, e.g. ttft=0.5,tpot=0.05,e2e=10; goodput = requests meeting all of them.",
        _TOKENS,
        parse=v.slo,
        metavar="LIST",
        label="SLO (goodput)",
    ),
    # ── results ──
    OptionSpec(
        "--results-json",
        "Write the end-of-run results to this JSON file (also for a run blocked before load).",
        _RESULTS,
        metavar="PATH",
        shown=_NOT_WRITTEN,
        label="Results JSON file",
    ),
    OptionSpec(
        "--html-report",
        "Write a self-contained HTML report of the run (summary, latency distributions, time series when recorded, "
        "failures, server metrics, configuration; opens offline) to PATH. Rebuild or compare later "
        "with: llmload report results.json [other.json] -o PATH.",
        _RESULTS,
        metavar="PATH",
        shown=_NOT_WRITTEN,
        label="HTML report file",
    ),
    OptionSpec(
        "--requests-log",
        "Stream one JSON line per finished request to PATH (each worker "
        "writes PATH with its worker index inserted before the extension).",
        _RESULTS,
        metavar="PATH",
        shown=_NOT_WRITTEN,
        label="Per-request log file",
    ),
    OptionSpec(
        "--timeseries",
        "Append the per-interval time series to PATH as JSON lines while the run goes (one line per "
        "row; the same rows as the results' timeseries).",
        _RESULTS,
        metavar="PATH",
        shown=_NOT_WRITTEN,
        label="Time-series file (JSON lines)",
    ),
    OptionSpec(
        "--timeseries-interval",
        "Length of one time-series interval in seconds, >= 0.1 (results' timeseries, --timeseries, "
        "--csv history and the progress line in the log).",
        _RESULTS,
        10.0,
        v.number(float, lambda x: 0.1 <= x < math.inf, "a finite number of seconds >= 0.1", "10"),
        "S",
        field="timeseries_interval_s",
        label="Time-series interval (s)",
    ),
    OptionSpec(
        "--checkpoint-interval",
        "Rewrite the --results-json file every S seconds during the run (atomically; marked partial, no "
        "verdict), so a killed process leaves results at most S seconds old. 0: only at the end.",
        _RESULTS,
        300.0,
        v.number(float, lambda x: 0 <= x < math.inf, "a finite number of seconds >= 0 (0: off)", "300"),
        "S",
        field="checkpoint_interval_s",
        label="Checkpoint interval (s)",
    ),
    OptionSpec(
        "--abort-on",
        "Stop the run early, exit status 1, when a condition holds on the time series for a while, e.g. "
        "'error_ratio>0.05 for 5m' or 'ttft_p99>10s for 10m'; repeat for several. Metrics: error_ratio, "
        "throttled_ratio, ttft/itl/tpot/e2e_p50/p90/p99 (with s or ms), output_tok_s, total_tok_s, req_s.",
        _RESULTS,
        (),
        v.thresholds,
        "EXPR",
        repeatable=True,
        field="abort_on",
        label="Abort on (stop early when)",
    ),
    OptionSpec(
        "--max-failure-ratio",
        "Exit with status 1 when failed / finished requests exceed this ratio (0..1; throttled requests count "
        "as failed); a run where nothing succeeded also exits 1.",
        _RESULTS,
        0.01,
        v.number(float, lambda x: 0.0 <= x <= 1.0, "a number from 0 to 1", "0.01"),
        "R",
        label="Max failure ratio (exit status 1 above)",
    ),
    # ── Prometheus exporter ──
    OptionSpec(
        "--prometheus-port",
        "Serve Prometheus metrics at /metrics on this port on the master (or the single "
        "process); workers serve nothing. 0 disables the exporter. The default port in use "
        "(another run on this machine) is a warning and no exporter; another port in use stops the run.",
        _PROM,
        9646,
        v.number(int, lambda x: 0 <= x <= 65535, "a port number from 0 to 65535 (0: off)", "9646"),
        "PORT",
        launch_only=True,
        label="Prometheus port",
    ),
    OptionSpec(
        "--prometheus-host",
        "Address the Prometheus exporter listens on: loopback by default (this machine only); "
        "0.0.0.0 for every interface (Kubernetes, a Prometheus on another host).",
        _PROM,
        "127.0.0.1",
        lambda _flag, value: value.strip(),
        "ADDR",
        launch_only=True,
        label="Prometheus listen address",
    ),
    OptionSpec(
        "--prometheus-grace",
        "After the run, keep /metrics up at most S seconds until one scrape has read the final "
        "totals. Only while a scraper scrapes regularly: no wait after no scrape or a single one "
        "(a stray curl), nor once the scraper is overdue.",
        _PROM,
        60.0,
        v.number(float, lambda x: 0 <= x < math.inf, "a finite number >= 0", "60"),
        "S",
        field="prometheus_grace_s",
        launch_only=True,
        label="Prometheus grace (s)",
    ),
)


def default(flag: str) -> Any:
    """The declared default of ``flag`` (e.g. ``default("--max-tokens") == 128``).

    Raises:
        KeyError: no such option.
    """
    for spec in OPTIONS:
        if spec.flag == flag:
            return spec.default
    raise KeyError(flag)


def describe(width: int = 100) -> str:
    """Every option, grouped, with help, default and environment variable (``llmload options``)."""
    lines = [
        "llmload options, given after the locustfile: locust -f $(llmload locustfile chat) -H URL --max-tokens 256 ...",
        "Each also works in locust.conf (max-tokens = 256) and as an environment variable (LOCUST_MAX_TOKENS=256).",
    ]
    indent = " " * 6
    for group in GROUPS:
        lines += ["", f"{group}:"]
        for spec in (s for s in OPTIONS if s.group == group):
            name = spec.flag if spec.is_flag else f"{spec.flag} {spec.metavar}"
            lines.append(f"  {name}")
            lines += textwrap.wrap(spec.help, width, initial_indent=indent, subsequent_indent=indent)
            if spec.choices:
                lines.append(f"{indent}one of: {', '.join(c for c in spec.choices if c)}")
            lines.append(f"{indent}default: {spec.default_text}; env: {spec.env}")
    return "\n".join(lines) + "\n"

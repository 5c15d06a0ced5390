"""llmload's command-line options: names, help, defaults and environment variables.

Registered on Locust's parser by ``llmload.hooks``; validated into a
``RunConfig`` by ``llmload.config``. Every option has exactly one documented
meaning (README "Options").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_PROMPT", "OPTIONS", "OptionSpec"]


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
    OptionSpec(
        "--request-rate",
        "Open loop: send R requests per second over all workers together "
        "(a positive number, or inf: every request eligible at once, bounded by --max-concurrency "
        "and users). Unset: closed loop, each user sends its next request when the last ends.",
        "",
        metavar="R",
    ),
    OptionSpec(
        "--arrival", "Inter-arrival distribution for --request-rate: poisson, constant or gamma.", "", metavar="KIND"
    ),
    OptionSpec("--burstiness", "Gamma shape for --arrival gamma (1 = Poisson, < 1 burstier).", "", metavar="B"),
    OptionSpec(
        "--max-concurrency",
        "Cap on requests in flight over all workers together (positive integer). Unset: the number of users.",
        "",
        metavar="N",
    ),
    OptionSpec("--results-json", "Write the end-of-run results to this JSON file.", "", metavar="PATH"),
    OptionSpec(
        "--tokenizer",
        "Tokenizer (transformers AutoTokenizer): a local directory, a tokenizer.json file, or a "
        "hub id already in the local cache (downloaded only with --allow-download). Counts tokens "
        "when the server sends no usage and makes synthetic prompts exact. Never taken from --model.",
        "",
        metavar="PATH_OR_NAME",
    ),
    OptionSpec("--connect-timeout", "Seconds to establish a connection.", 30.0, metavar="S"),
    OptionSpec("--read-timeout", "Longest silence in seconds between two reads of a reply.", 300.0, metavar="S"),
    OptionSpec("--request-timeout", "Longest total time in seconds for one request.", 1800.0, metavar="S"),
    OptionSpec(
        "--api-key-file", "File whose first line is the API key (instead of --api-key-env).", "", metavar="PATH"
    ),
    OptionSpec("--insecure", "Do not verify the server's TLS certificate (printed as a warning).", False, is_flag=True),
    OptionSpec(
        "--max-failure-ratio",
        "Exit with status 1 when failed / finished requests exceed this ratio (0..1).",
        0.01,
        metavar="R",
    ),
    OptionSpec(
        "--skip-preflight",
        "Do not probe the server before load (GET /v1/models is still used "
        "to find the model when --model is not given).",
        False,
        is_flag=True,
    ),
    OptionSpec(
        "--requests-log",
        "Stream one JSON line per finished request to PATH (each worker "
        "writes PATH with its worker index inserted before the extension).",
        "",
        metavar="PATH",
    ),
    # ── Prometheus exporter (issue 5) ──
    OptionSpec(
        "--prometheus-port",
        "Serve Prometheus metrics at /metrics on this port on the master (or the single "
        "process); workers serve nothing. 0 disables the exporter.",
        9646,
        metavar="PORT",
    ),
    OptionSpec(
        "--prometheus-host",
        "Address the Prometheus exporter listens on. Empty: all interfaces.",
        "",
        metavar="ADDR",
    ),
    OptionSpec(
        "--prometheus-grace",
        "After the run, keep /metrics up at most S seconds until one scrape has read the final "
        "totals. No wait when nothing has scraped /metrics yet.",
        60.0,
        metavar="S",
    ),
    OptionSpec(
        "--server-metrics",
        "Scrape the inference server's Prometheus metrics during the run (master only): "
        "auto = the target's /metrics if it answers Prometheus text; off; or URLs, comma-separated "
        "(auto may be one of them, e.g. auto,http://gpu-host:9400/metrics for a DCGM exporter).",
        "auto",
        metavar="auto|off|URL[,URL...]",
    ),
    # ── workloads (issue 3) ──
    OptionSpec(
        "--dataset",
        'Prompt file: JSONL lines with "prompt" or chat "messages" (optional per-line '
        '"max_tokens"), or ShareGPT JSON. Replaces --prompt.',
        "",
        metavar="PATH",
    ),
    OptionSpec("--dataset-format", "auto, jsonl or sharegpt.", "auto", metavar="FORMAT"),
    OptionSpec(
        "--input-tokens",
        "Synthetic prompts of N tokens (exact with --tokenizer, approximate without), or MIN:MAX "
        "(uniform). Replaces --prompt.",
        "",
        metavar="N",
    ),
    OptionSpec("--input-tokens-stddev", "Normal spread of --input-tokens N (tokens).", "", metavar="S"),
    OptionSpec(
        "--output-tokens",
        "max_tokens per request: M, MIN:MAX (uniform), or 'dataset' (the dataset's per-line "
        "max_tokens or ShareGPT reply length). Overrides --max-tokens.",
        "",
        metavar="M",
    ),
    OptionSpec("--output-tokens-stddev", "Normal spread of --output-tokens M (tokens).", "", metavar="S"),
    OptionSpec(
        "--prefix-tokens",
        "Common prefix of K tokens at the start of every conversation (prefix caching).",
        0,
        metavar="K",
    ),
    OptionSpec(
        "--turns",
        "Multi-turn chat: each user keeps a conversation of T turns (history and replies grow), then starts a new one.",
        1,
        metavar="T",
    ),
    OptionSpec("--seed", "Seed of prompt order, synthetic text and lengths (integer).", 0, metavar="N"),
    OptionSpec(
        "--allow-download",
        "Let --tokenizer download from the Hugging Face hub (off: local files and cache only).",
        False,
        is_flag=True,
    ),
    OptionSpec(
        "--slo",
        "Service-level objectives in seconds, e.g. ttft=0.5,tpot=0.05,e2e=10; goodput = requests meeting all of them.",
        "",
        metavar="LIST",
    ),
    OptionSpec(
        "--warmup-requests",
        "Send K requests first (over all workers) and leave them out of every statistic.",
        0,
        metavar="K",
    ),
)

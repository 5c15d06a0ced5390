"""The shape of one option declaration, and the parsers of option values (text in, typed value out).

Each parser takes ``(flag, text)``, where ``text`` is the option's value as
Locust passed it (CLI, ``locust.conf``, ``LOCUST_*`` environment or the web UI
form, all strings) and never blank: an unset option takes its declared
default in ``llmload.settings.options`` without reaching a parser. Every error names
the flag, the value and an accepted example.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.errors import ConfigError
from llmload.settings.goodput import SLO, parse_slo
from llmload.settings.thresholds import Threshold, parse_thresholds

__all__ = [
    "LengthSpec",
    "OptionSpec",
    "Parse",
    "choice",
    "endpoint_path",
    "extra_body",
    "flag",
    "host_url",
    "length",
    "number",
    "parse_rate",
    "positive_int",
    "rate",
    "server_metrics",
    "slo",
    "text",
    "thresholds",
]

Parse = Callable[[str, str], Any]
"""``(flag, text) -> value``; raises ``ConfigError`` naming the flag, the value and a fix."""


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


def text(_flag: str, value: str) -> str:
    """The text as given (not stripped)."""
    return value


def readable_file(flag_name: str, value: str) -> str:
    """The path of a file this process can read, as given: checked with the other values, before any load.

    Raises:
        ConfigError: no such file, a folder, or not readable (the message names the path and the fix).
    """
    path = Path(value)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"{flag_name} {value!r} {why}; pass the path of a file (relative to {Path.cwd()})")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag_name} {value!r} is not readable by this process; fix its permissions")
    return value


_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions")  # the paths llmload appends to -H itself


def host_url(flag_name: str, value: str) -> str:
    """A target host (``-H``) that is a base URL, as given: its path may be a prefix, never an endpoint's path.

    llmload appends the endpoint path (``/v1/chat/completions``, ``--endpoint-path``) to
    the host's path, so ``-H http://h:8000/v1/chat/completions`` (the whole URL of an
    endpoint, as curl examples show it) would post to ``.../chat/completions/v1/chat/completions``.
    A path ending in ``/v1`` is left to the preflight, which names the fix when it 404s.

    Raises:
        ConfigError: the path ends in an endpoint's path; the message shows the host without
            credentials or query string, and the base URL to pass instead.
    """
    parts = urlsplit(value.strip())
    path = parts.path.rstrip("/")
    suffix = next((s for s in _ENDPOINT_SUFFIXES if path.lower().endswith(s)), None)
    if suffix is None:
        return value
    root = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never a user:password
    base = path[: -len(suffix)]
    if base.lower().endswith("/v1"):
        base = base[: -len("/v1")]
        fix = f"{flag_name} {root}{base}"
    else:
        fix = f"{flag_name} {root} --endpoint-path {path}"
    if parts.query:
        fix += " (and its query string)"
    raise ConfigError(
        f"{flag_name} {root}{parts.path} ends in an endpoint path ({path[len(base) :]}), "
        f"but llmload appends the endpoint's path to {flag_name} itself (/v1/chat/completions, /v1/completions "
        f"or --endpoint-path); pass the server's base URL: {fix}"
    )


def flag(_flag: str, value: str) -> bool:
    """A switch: ``1``, ``true``, ``yes`` or ``on`` (any case) is on; anything else off."""
    return value.strip().lower() in ("1", "true", "yes", "on")


def number(convert: Callable[[str], Any], valid: Callable[[Any], bool], requirement: str, example: str) -> Parse:
    """The one numeric parser: ``convert`` the text, then check it with ``valid``.

    Raises (from the returned parser):
        ConfigError: ``{flag} must be {requirement}, got {text!r}; pass e.g. {flag} {example}``.
    """

    def parse(flag_name: str, value: str) -> Any:
        try:
            result = convert(value.strip())
        except ValueError:
            result = None
        if result is None or not valid(result):
            raise ConfigError(f"{flag_name} must be {requirement}, got {value!r}; pass e.g. {flag_name} {example}")
        return result

    return parse


def positive_int(*, unset_means: str = "", zero: str = "", example: str = "300") -> Parse:
    """A positive integer; ``unset_means`` is said when a value <= 0 is refused, ``zero`` replaces that for 0.

    Every refusal ends with an accepted value: ``pass e.g. {flag} {example}``.
    """

    def parse(flag_name: str, value: str) -> int:
        try:
            result = int(value.strip())
        except ValueError:
            raise ConfigError(
                f"{flag_name} must be a positive integer, got {value!r}; pass e.g. {flag_name} {example}"
            ) from None
        if result == 0 and zero:
            raise ConfigError(f"{flag_name} must be a positive integer, got 0; {zero}; pass e.g. {flag_name} {example}")
        if result <= 0:
            hint = f" {unset_means}" if unset_means else ""
            raise ConfigError(
                f"{flag_name} must be a positive integer, got {result}.{hint} Pass e.g. {flag_name} {example}"
            )
        return result

    return parse


def choice(*values: str) -> Parse:
    """One of ``values`` (any case; returned lower-case)."""

    def parse(flag_name: str, value: str) -> str:
        picked = value.strip().lower()
        if picked not in values:
            raise ConfigError(
                f"{flag_name} must be one of {', '.join(values)}, got {value!r}; pass e.g. {flag_name} {values[0]}"
            )
        return picked

    return parse


def parse_rate(raw: str) -> float:
    """Parse ``--request-rate``: a positive number of requests per second, or ``inf``.

    Raises:
        ConfigError: zero, negative, NaN or non-numeric values, naming the accepted forms.
    """
    value_text = raw.strip().lower()
    if value_text == "inf":
        return math.inf
    try:
        value = float(value_text)
    except ValueError:
        value = math.nan
    if not (value > 0) or math.isinf(value):
        raise ConfigError(
            f"--request-rate must be a positive number of requests per second or inf, got {raw!r}; pass e.g. "
            "--request-rate 20, or --request-rate inf for unlimited (0 and negative values are refused)"
        )
    return value


def rate(_flag: str, value: str) -> float:
    """``--request-rate`` (see ``parse_rate``)."""
    return parse_rate(value)


def slo(_flag: str, value: str) -> SLO:
    """``--slo`` (see ``llmload.settings.goodput.parse_slo``)."""
    return parse_slo(value)


def thresholds(flag_name: str, value: str) -> tuple[Threshold, ...]:
    """``--abort-on``: one expression per line (see ``llmload.settings.thresholds``)."""
    return parse_thresholds(flag_name, value)


def length(*, keyword: str = "") -> Parse:
    """``N`` or ``MIN:MAX`` (positive integers) as a ``LengthSpec``; ``keyword`` (e.g. ``dataset``) passes through."""

    def parse(flag_name: str, value: str) -> LengthSpec | str:
        if keyword and value.strip().lower() == keyword:
            return keyword
        low_text, sep, high_text = value.strip().partition(":")
        try:
            low, high = int(low_text), int(high_text) if sep else None
        except ValueError:
            low, high = 0, None
        if low < 1 or (high is not None and high < low):
            raise ConfigError(
                f"{flag_name} must be a positive integer N or a range MIN:MAX with 1 <= MIN <= MAX, got {value!r}; "
                f"pass e.g. {flag_name} 512 or {flag_name} 256:1024"
            )
        if high is not None:
            return LengthSpec(mean=(low + high) // 2, low=low, high=high)
        return LengthSpec(mean=low)

    return parse


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One llmload command-line option.

    Also readable from ``locust.conf`` (key = long flag without dashes) and from
    the environment variable ``env`` (``LOCUST_`` prefix, like Locust's own).

    Attributes:
        flag: the long flag, e.g. ``--max-tokens``.
        help: one-paragraph help text (``--help``, web UI, ``llmload options``).
        group: one of ``llmload.settings.options.GROUPS``.
        default: the value when the option is unset or blank (already typed).
        parse: ``(flag, text) -> value`` for a set value (below).
        metavar: the value's name in help; None for switches.
        choices: offered as a dropdown in the web UI (``""`` = unset); the parser checks the value.
        is_flag: a switch without a value.
        is_secret: masked in the web UI.
        repeatable: may be given several times (Locust collects a list); the parser gets each line of each
            value on its own and returns a tuple; the option's value is their concatenation.
        if_unset: when set, a blank value is refused with this message instead of taking the default.
        field: the ``RunConfig`` attribute it sets; "" = ``dest``; None = read by a cross-field rule.
        launch_only: used once when the process starts (not in the web UI's form, where it would do nothing).
        shown: the default as users read it (``llmload options``, the web form's help, the README's
            options table), when ``default`` alone does not say it (e.g. ``not set: closed loop``); "" = derived.
        label: the web UI form's label, in the field's terms (e.g. "SLO (goodput)"); required.
    """

    flag: str
    help: str
    group: str
    default: Any = None
    parse: Parse = text
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    is_flag: bool = False
    is_secret: bool = False
    repeatable: bool = False
    if_unset: str | None = None
    field: str | None = ""
    launch_only: bool = False
    shown: str = ""

    @property
    def default_text(self) -> str:
        """The default in words: ``shown``, else ``off`` (switches), ``none`` (no value), or the value (``30``)."""
        if self.shown:
            return self.shown
        if self.is_flag:
            return "off"
        if self.default is None or self.default in ("", ()):
            return "none"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)

    label: str = ""

    def __post_init__(self) -> None:
        if not self.label.strip():
            raise ValueError(f"{self.flag} needs a label for the web UI form (OptionSpec(..., label=...))")

    @property
    def dest(self) -> str:
        """The attribute name on Locust's parsed options."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable that sets this option."""
        return "LOCUST_" + self.dest.upper()

    @property
    def target(self) -> str | None:
        """The ``RunConfig`` attribute this option sets directly, or None."""
        return self.dest if self.field == "" else self.field

    @property
    def locust_default(self) -> str | bool | None:
        """The default as Locust's parser and the web UI show it (text; switches: False; repeatable: None)."""
        if self.is_flag:
            return False
        if self.repeatable:
            return None
        return "" if self.default is None else str(self.default)

    def value(self, raw: object) -> Any:
        """Parse one value as Locust holds it (str, bool, number or None).

        Raises:
            ConfigError: naming the flag, the value and an accepted example.
        """
        if self.repeatable:
            return self._values(raw)
        if isinstance(raw, (list, tuple)):
            raw = "\n".join(str(item) for item in raw)
        raw_text = None if raw is None else str(raw)
        if raw_text is None or not raw_text.strip():
            if self.if_unset is not None:
                raise ConfigError(self.if_unset)
            return self.default
        return self.parse(self.flag, raw_text)

    def _values(self, raw: object) -> Any:
        """A repeatable option: each line (LF) of each value given is parsed on its own; the results are concatenated.

        Locust hands the environment variable over as one list item, like one
        value given on the command line, so LF is the separator in both (the
        documented ``LOCUST_HEADER`` form: one per line). Each line reaches the
        parser whole (a CR in it is the parser's to refuse).
        """
        texts = [str(item) for item in raw] if isinstance(raw, (list, tuple)) else [] if raw is None else [str(raw)]
        items = [line for text in texts for line in text.split("\n") if line.strip()]
        if not items:
            if self.if_unset is not None:
                raise ConfigError(self.if_unset)
            return self.default
        return tuple(part for item in items for part in self.parse(self.flag, item))


def server_metrics(flag_name: str, value: str) -> str:
    """``auto``, ``off``, or comma-separated http(s) URLs (``auto`` among them allowed); returned without spaces."""
    parts = [p.strip() for p in value.split(",") if p.strip()] or ["auto"]
    if "off" in parts and len(parts) > 1:
        raise ConfigError(f"{flag_name} {value!r}: 'off' cannot be combined with other entries; pass {flag_name} off")
    for part in parts:
        split = urlsplit(part)
        if part not in ("auto", "off") and (split.scheme not in ("http", "https") or not split.netloc):
            raise ConfigError(
                f"{flag_name}: {part!r} is not auto, off or an http(s) URL; "
                f"pass e.g. {flag_name} auto,http://gpu-host:9400/metrics"
            )
    return ",".join(parts)


def endpoint_path(flag_name: str, value: str) -> str:
    """A URL path starting with ``/`` (a query string is allowed)."""
    path = value.strip()
    if not path.startswith("/") or "://" in path or " " in path:
        raise ConfigError(
            f"{flag_name} must be a URL path starting with /, got {value!r}; "
            f"pass e.g. {flag_name} /openai/deployments/m/chat/completions"
        )
    return path


_OWNED_BODY_KEYS = {
    "model": "--model",
    "prompt": "--prompt or --dataset",
    "messages": "--prompt or --dataset",
    "stream": "--no-stream",
    "max_tokens": "--max-tokens and --max-tokens-field",
    "max_completion_tokens": "--max-tokens and --max-tokens-field",
    "temperature": "--temperature",
    "ignore_eos": "--ignore-eos",
}
_ONE_CHOICE_KEYS = ("n", "best_of")  # several choices per request: each would count as one reply


def extra_body(flag_name: str, value: str) -> dict[str, Any]:
    """A JSON object merged into every request body, without keys that break llmload's accounting.

    Refused: keys set by other options (``model``, ``stream``, ``max_tokens`` …),
    ``n`` or ``best_of`` other than 1, ``echo`` true (the prompt would count as output), and
    ``stream_options`` (see ``--stream-usage``).
    """
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise ConfigError(
            f"{flag_name} must be a JSON object, got {value!r} ({exc}); pass e.g. {flag_name} '{{\"top_p\": 0.9}}'"
        ) from None
    if not isinstance(obj, dict):
        raise ConfigError(
            f"{flag_name} must be a JSON object, got {value!r}; pass e.g. {flag_name} '{{\"top_p\": 0.9}}'"
        )
    for key in obj:
        if key in _OWNED_BODY_KEYS:
            raise ConfigError(f"{flag_name} may not set {key!r}: llmload sets it; use {_OWNED_BODY_KEYS[key]} instead")
        if key == "stream_options":
            raise ConfigError(f"{flag_name} may not set 'stream_options'; use --stream-usage auto|on|off instead")
    for key in _ONE_CHOICE_KEYS:
        if key in obj and obj[key] != 1:
            raise ConfigError(
                f"{flag_name} sets {key}={obj[key]!r}: several choices per request break the token and latency "
                f"accounting (one reply per request); drop {key!r}"
            )
    if obj.get("echo") not in (None, False):
        raise ConfigError(
            f"{flag_name} sets echo={obj['echo']!r}: the prompt would count as output tokens; drop 'echo'"
        )
    return obj

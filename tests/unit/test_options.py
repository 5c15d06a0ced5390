"""The option table: one declaration per option feeds the parser, the config, and ``llmload options``."""

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.errors import ConfigError
from llmload.request.preflight import join_url
from llmload.settings.config import RunConfig, Timeouts
from llmload.settings.credentials import public_header
from llmload.settings.options import GROUPS, OPTIONS, default, describe

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
OPTIONS_PAGE = DOCS / "reference" / "options.md"  # generated from the option table (llmload.settings.options_doc)


def _llmload(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "llmload", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# NC-12: llmload options lists every option (Locust prints --help before loading the locustfile).
def test_nc12_llmload_options_lists_every_option_grouped_with_help_and_default():
    text = _llmload("options")
    assert text == describe()
    positions = [text.index(f"\n{group}:\n") for group in GROUPS]
    assert positions == sorted(positions)
    for spec in OPTIONS:
        at = text.index(f"\n  {spec.flag}")
        group_at = max(p for p in positions if p < at)
        assert text[group_at:].startswith(f"\n{spec.group}:\n"), spec.flag
        entry = text[at : text.index("default:", at)]
        assert spec.help.split()[0] in entry
        assert f"env: {spec.env}" in text[at:]
    for flag, shown in (("--max-tokens", "128"), ("--request-timeout", "1800"), ("--prometheus-port", "9646")):
        at = text.index(f"\n  {flag} ")
        assert f"default: {shown};" in text[at : text.index("\n  --", at + 1)]
    for needle in ("--max-tokens", "--num-requests", "--results-json", "--request-rate", "--tokenizer"):
        assert needle in text


def test_issue24_llmload_options_first_line_names_the_installed_locustfile():
    """It named locustfiles/chat.py, a path of a clone that a pip user does not have."""
    first = describe().splitlines()[0]
    assert "locust -f $(llmload locustfile chat) -H URL --max-tokens 256 ..." in first
    assert "locustfiles/" not in first


def test_nc12_llmload_help_and_readme_usage_point_to_llmload_options():
    assert "llmload options" in _llmload("--help")
    assert "llmload options" in README.read_text()
    usage = (DOCS / "getting-started.md").read_text().split("## Usage", 1)[1][:1500]
    assert "llmload options" in usage


def test_options_defaults_are_the_config_defaults():
    as_locust_gives_them = SimpleNamespace(**{spec.dest: spec.locust_default for spec in OPTIONS})
    config, from_table = RunConfig(), RunConfig.from_options(as_locust_gives_them)
    assert config == from_table
    assert config.timeouts == Timeouts(default("--connect-timeout"), default("--read-timeout"), 1800.0)
    assert (config.prometheus_port, config.prometheus_grace_s, config.max_failure_ratio) == (9646, 60.0, 0.01)


def test_options_declare_each_flag_once_in_a_known_group():
    flags = [spec.flag for spec in OPTIONS]
    assert len(flags) == len(set(flags))
    assert {spec.group for spec in OPTIONS} == set(GROUPS)
    order = [GROUPS.index(spec.group) for spec in OPTIONS]
    assert order == sorted(order)  # table order is the web UI form's order


def test_header_option_reads_repeats_and_lines_and_hides_values_in_its_error():
    spec = next(s for s in OPTIONS if s.flag == "--header")
    assert spec.value(["api-key: k1", "x-a: b: c"]) == (("api-key", "k1"), ("x-a", "b: c"))
    assert spec.value("x-a: 1\nx-b: 2") == (("x-a", "1"), ("x-b", "2"))
    assert spec.value(None) == ()
    with pytest.raises(ConfigError) as info:
        spec.value("api key: secret-value")
    assert "secret-value" not in str(info.value)
    assert "pass e.g. --header 'api-key: KEY'" in str(info.value)


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("Content-Length: 5", "sets it from each request body"),
        ("transfer-encoding: chunked", "ambiguous"),
        ("Host: vhost.internal", "comes from -H"),
        ("Connection: close", "keep-alive connections"),
        ("Expect: 100-continue", "stall"),
    ],
)
def test_header_option_refuses_framing_headers_before_load_naming_the_header_and_why(given, why):
    spec = next(s for s in OPTIONS if s.flag == "--header")
    name = given.split(":")[0]
    with pytest.raises(ConfigError) as info:
        spec.value([given])
    assert f"the {name} header is refused" in str(info.value)
    assert why in str(info.value)
    values = {s.dest: s.locust_default for s in OPTIONS}
    with pytest.raises(ConfigError, match=f"{name} header is refused"):
        RunConfig.from_options(SimpleNamespace(**{**values, "header": ["x-trace: on", given]}))


@pytest.mark.parametrize("given", ["x-a: ok\r\nInjected: evil", "x-a: ok\rInjected: evil", "x-a: ok\x00evil"])
def test_header_option_refuses_a_carriage_return_inside_one_value_instead_of_injecting_a_header(given):
    spec = next(s for s in OPTIONS if s.flag == "--header")
    with pytest.raises(ConfigError) as info:
        spec.value([given])  # one --header on the command line
    message = str(info.value)
    assert "header 'x-a' contains a" in message
    assert "evil" not in message  # the value may be a credential: never echoed


def test_header_option_line_feed_separates_headers_each_checked_like_a_header_of_its_own():
    # LOCUST_HEADER reaches llmload as one list item, as one --header would: LF separates headers in both
    spec = next(s for s in OPTIONS if s.flag == "--header")
    assert spec.value(["x-a: 1\nx-b: 2\n"]) == (("x-a", "1"), ("x-b", "2"))
    with pytest.raises(ConfigError, match="the Content-Length header is refused"):
        spec.value(["x-a: ok\nContent-Length: 0"])  # a line cannot smuggle a framing header past the check
    with pytest.raises(ConfigError, match="--header must be 'Name: value'"):
        spec.value(["x-a: ok\nGET /admin HTTP/1.1"])


def test_api_key_header_refuses_framing_header_names():
    spec = next(s for s in OPTIONS if s.flag == "--api-key-header")
    with pytest.raises(ConfigError, match="the Host header is refused"):
        spec.value("Host")


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("Authorization", "Bearer s3", "Authorization: ***"),
        ("api-key", "s3", "api-key: ***"),
        ("X-API-Key", "s3", "X-API-Key: ***"),
        ("Cookie", "session=s3", "Cookie: ***"),
        ("x-gateway-token", "s3", "x-gateway-token: ***"),
        ("Ocp-Apim-Subscription", "s3", "Ocp-Apim-Subscription: ***"),  # named by --api-key-header
        ("x-trace", "on", "x-trace: on"),
    ],
)
def test_public_header_hides_credential_values(name, value, shown):
    assert public_header(name, value, ("ocp-apim-subscription",)) == shown


def test_join_url_never_doubles_the_slash_and_keeps_the_query_last():
    assert join_url("http://h/api/v1/", "/v1/models") == "http://h/api/v1/v1/models"
    assert join_url("http://h/openai?api-version=1", "/v1/models") == "http://h/openai/v1/models?api-version=1"


_OPTION_ROW = re.compile(r"\| `(--[a-z-]+)[^`]*` \| (.*?) \| (.*?) \|(?: `LOCUST_[A-Z_]+` \|)?$")


def _option_rows(*pages: Path) -> dict[str, list[tuple[str, str]]]:
    """Every option-table row of ``pages``: flag → [(meaning, default)]."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            found = _OPTION_ROW.match(line)
            if found:
                rows.setdefault(found.group(1), []).append((found.group(2), found.group(3)))
    return rows


def _readme_option_rows() -> dict[str, list[tuple[str, str]]]:
    """Every row of the option tables in README.md and docs/ (the reference, notes, Prometheus): flag → rows."""
    return _option_rows(README, *sorted(DOCS.rglob("*.md")))


def test_options_reference_lists_every_option_and_nothing_else():
    assert set(_option_rows(OPTIONS_PAGE)) == {spec.flag for spec in OPTIONS}
    assert all(len(rows) == 1 for rows in _option_rows(OPTIONS_PAGE).values())


def test_readme_and_docs_option_tables_name_only_real_options():
    assert set(_readme_option_rows()) == {spec.flag for spec in OPTIONS}


def test_readme_options_tables_show_the_default_llmload_options_shows():
    text = describe()
    for spec in OPTIONS:
        assert f"default: {spec.default_text}; env: {spec.env}" in text
        for _meaning, shown in _readme_option_rows()[spec.flag]:
            assert shown.replace("`", "") == spec.default_text, spec.flag


def test_llmload_options_never_shows_a_default_as_unset_or_as_a_float_repr():
    text = describe()
    assert "default: unset" not in text
    assert "default: 30.0" not in text
    assert "default: 60;" in text  # --max-retry-after 60.0, --prometheus-grace 60.0


def test_readme_and_help_say_the_same_about_turns():
    spec = next(s for s in OPTIONS if s.flag == "--turns")
    ((meaning, _),) = _option_rows(OPTIONS_PAGE)["--turns"]
    for words in ("each turn sends the conversation so far", "after T turns, or a failed turn, it starts a new one"):
        assert words in spec.help
        assert words in meaning


def test_max_concurrency_zero_is_refused_with_an_example_value():
    spec = next(s for s in OPTIONS if s.flag == "--max-concurrency")
    with pytest.raises(ConfigError) as info:
        spec.value("0")
    assert "0 never means unlimited" in str(info.value)
    assert str(info.value).endswith("pass e.g. --max-concurrency 64")


def test_readme_says_llmload_sweep_writes_sweep_json_by_default():
    assert "combined results (default sweep.json)" in _llmload("sweep", "--help").replace("\n", " ")
    sweeps = (DOCS / "guides" / "sweep.md").read_text(encoding="utf-8")[:2500]
    assert "default `sweep.json`" in sweeps

"""RunConfig validation: every bad value is refused with the value and a fix (before any load)."""

from types import SimpleNamespace

import pytest

from llmload.errors import ConfigError, InvalidOptionsError
from llmload.settings.config import OPTIONS, RunConfig, Timeouts


@pytest.fixture
def named_files(tmp_path, monkeypatch):
    """The files these option tests name exist (file options are checked with the other values)."""
    for name in ("d.jsonl", "s.jsonl", "t.jsonl"):
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)


def options(**overrides):
    values = {spec.dest: spec.default for spec in OPTIONS}
    values.update(overrides)
    return SimpleNamespace(**values)


def test_config_defaults_are_valid():
    config = RunConfig.from_options(options())
    assert config.max_tokens == 128
    assert config.stream is True
    assert config.num_requests is None
    assert config.model is None
    assert config.results_json is None
    assert config.timeouts == Timeouts(30.0, 300.0, 1800.0)


def test_config_reads_string_values_from_web_ui_or_env():
    config = RunConfig.from_options(
        options(max_tokens="64", num_requests="300", temperature="0.5", no_stream="true", ignore_eos="1")
    )
    assert (config.max_tokens, config.num_requests, config.temperature) == (64, 300, 0.5)
    assert config.stream is False
    assert config.ignore_eos is True


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("max_tokens", "0", "--max-tokens must be a positive integer, got 0"),
        ("max_tokens", "-5", "--max-tokens must be a positive integer, got -5"),
        ("max_tokens", "lots", "--max-tokens must be a positive integer, got 'lots'"),
        ("num_requests", "0", "Leave it unset for no limit"),
        ("num_requests", "-1", "--num-requests must be a positive integer, got -1"),
        ("temperature", "-0.1", "--temperature must be a finite number >= 0"),
        ("temperature", "hot", "--temperature must be a finite number >= 0, got 'hot'"),
        ("read_timeout", "0", "--read-timeout must be a finite number of seconds > 0"),
        ("request_timeout", "inf", "--request-timeout must be a finite number of seconds > 0"),
        ("prompt", "  ", "--prompt must not be empty"),
        ("server_metrics", "ftp://h/metrics", "--server-metrics: 'ftp://h/metrics' is not auto, off or an http(s) URL"),
        ("server_metrics", "yes", "--server-metrics: 'yes' is not auto, off"),
    ],
)
def test_config_rejects_bad_values_with_value_and_fix(field, value, needle):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_options(options(**{field: value}))
    assert needle in str(info.value)
    assert "e.g." in str(info.value)


def test_option_env_names_follow_locust_prefix():
    names = {spec.flag: spec.env for spec in OPTIONS}
    assert names["--max-tokens"] == "LOCUST_MAX_TOKENS"
    assert names["--num-requests"] == "LOCUST_NUM_REQUESTS"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "auto"),
        ("", "auto"),
        ("off", "off"),
        (" auto , http://gpu:9400/metrics ", "auto,http://gpu:9400/metrics"),
        ("https://router/metrics", "https://router/metrics"),
    ],
)
def test_config_server_metrics_values(value, expected):
    assert RunConfig.from_options(options(server_metrics=value)).server_metrics == expected


def test_config_server_metrics_off_stands_alone():
    with pytest.raises(ConfigError, match="'off' cannot be combined"):
        RunConfig.from_options(options(server_metrics="off,http://gpu:9400/metrics"))


def test_config_max_retry_after_default_value_and_refusal():
    assert RunConfig.from_options(options()).max_retry_after_s == 60.0
    assert RunConfig.from_options(options(max_retry_after="2.5")).max_retry_after_s == 2.5
    with pytest.raises(ConfigError, match=r"--max-retry-after must be a finite number of seconds > 0, got '0'"):
        RunConfig.from_options(options(max_retry_after="0"))


def test_issue24_every_invalid_option_is_reported_in_one_message():
    """Only the first bad value used to be reported: fix one, run again, meet the next."""
    bad = options(max_tokens="abc", read_timeout="-1", preflight_timeout="0", prometheus_port="70000")
    with pytest.raises(InvalidOptionsError) as caught:
        RunConfig.from_options(bad)
    flags = [flag for flag, _message in caught.value.problems]
    assert flags == ["--max-tokens", "--read-timeout", "--preflight-timeout", "--prometheus-port"]
    text = str(caught.value)
    assert text.startswith("4 invalid options: (1) --max-tokens must be a positive integer, got 'abc'")
    for n, (flag, message) in enumerate(caught.value.problems, 1):
        assert f"({n}) {message}" in text
        assert flag in message  # each message names its own option


def test_issue24_one_invalid_option_reads_as_its_own_message():
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_options(options(max_tokens="abc"))
    assert str(caught.value).startswith("--max-tokens must be a positive integer, got 'abc'")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"num_requests": "10"}, "--trace and --num-requests cannot be used together: the trace sets the requests"),
        ({"request_rate": "5"}, "--trace and --request-rate cannot be used together"),
        ({"dataset": "d.jsonl"}, "--trace and --dataset cannot be used together"),
        ({"turns": "3"}, "--trace and --turns cannot be used together"),
    ],
)
def test_config_trace_refuses_options_that_also_set_the_requests(extra, message, named_files):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_options(options(trace="t.jsonl", **extra))


def test_config_sessions_file_refuses_turns_and_other_prompt_sources(named_files):
    with pytest.raises(ConfigError, match="--sessions and --turns cannot be used together"):
        RunConfig.from_options(options(sessions="s.jsonl", turns="2"))
    with pytest.raises(ConfigError, match="--sessions and --dataset cannot be used together"):
        RunConfig.from_options(options(sessions="s.jsonl", dataset="d.jsonl"))


def test_config_trace_and_session_options_parse(named_files):
    config = RunConfig.from_options(
        options(trace="t.jsonl", trace_speed="2", trace_block_tokens="16", think_time="exp:2", session_header="X-S")
    )
    assert (config.trace, config.trace_speed, config.trace_block_tokens) == ("t.jsonl", 2.0, 16)
    assert config.think_time is not None
    assert config.think_time.describe() == "exp:2"
    assert config.session_header == "X-S"
    assert config.shared_totals == ("--trace",)


def test_file_options_that_name_no_readable_file_are_reported_with_the_other_bad_values(tmp_path):
    """A missing --sessions file is refused with the other invalid values at once (the web form showed it at START)."""
    with pytest.raises(InvalidOptionsError) as caught:
        RunConfig.from_options(options(sessions=str(tmp_path / "nope.jsonl"), max_tokens="abc", trace=str(tmp_path)))
    text = str(caught.value)
    assert f"--sessions '{tmp_path / 'nope.jsonl'}' does not exist; pass the path of a file" in text
    assert f"--trace '{tmp_path}' is a folder" in text
    assert "--max-tokens must be a positive integer" in text


_GW = "https://gw.example.com"


@pytest.mark.parametrize(
    ("host", "shown", "fix"),
    [
        ("http://h:8000/v1/chat/completions", "http://h:8000/v1/chat/completions", "-H http://h:8000"),
        ("http://h:8000/v1/completions/", "http://h:8000/v1/completions/", "-H http://h:8000"),
        (
            "https://u:secret@gw.example.com/openai/v1/chat/completions?key=secret",
            f"{_GW}/openai/v1/chat/completions",
            f"-H {_GW}/openai",
        ),
        (
            f"{_GW}/deployments/m/chat/completions",
            f"{_GW}/deployments/m/chat/completions",
            f"-H {_GW} --endpoint-path /deployments/m/chat/completions",
        ),
    ],
)
def test_issue24_host_ending_in_an_endpoint_path_is_reported_with_the_other_bad_values(host, shown, fix):
    """-H http://h:8000/v1/chat/completions was accepted: requests went to .../chat/completions/v1/chat/completions."""
    with pytest.raises(InvalidOptionsError) as caught:
        RunConfig.from_options(options(host=host, max_tokens="abc"))
    assert [flag for flag, _message in caught.value.problems] == ["-H", "--max-tokens"]
    text = str(caught.value)
    assert text.startswith(f"2 invalid options: (1) -H {shown} ends in an endpoint path")
    assert f"pass the server's base URL: {fix}" in text
    assert "secret" not in text


@pytest.mark.parametrize(
    "host", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "https://gw.example.com/openai?api-version=1", ""]
)
def test_issue24_host_of_a_base_url_is_accepted(host):
    RunConfig.from_options(options(host=host))

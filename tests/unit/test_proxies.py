"""llmload.settings.proxies: the proxy environment read as other Python HTTP clients read it."""

from __future__ import annotations

import urllib.request

import pytest

from llmload.errors import ConfigError
from llmload.settings.proxies import choose_proxy, route

PROXY = "http://127.0.0.1:3128"


def test_route_http_target_uses_http_proxy_not_https_proxy():
    proxies = {"http": PROXY, "https": "http://127.0.0.1:9999"}
    decision = route("http://10.0.0.5:8000", proxies, ignore=False)
    assert decision.proxy is not None
    assert (decision.proxy.host, decision.proxy.port, decision.proxy.variable) == ("127.0.0.1", 3128, "HTTP_PROXY")
    assert decision.note is not None
    assert "through the proxy http://127.0.0.1:3128 (from HTTP_PROXY" in decision.note


def test_route_https_target_uses_https_proxy_by_connect():
    decision = route("https://api.example.com", {"http": "http://127.0.0.1:9999", "https": PROXY}, ignore=False)
    assert decision.proxy is not None
    assert decision.proxy.port == 3128
    assert decision.note is not None
    assert "CONNECT tunnel" in decision.note


def test_route_all_proxy_is_the_fallback_for_any_scheme():
    decision = route("https://api.example.com", {"all": PROXY}, ignore=False)
    assert decision.proxy is not None
    assert decision.proxy.variable == "ALL_PROXY"


def test_route_without_proxy_variables_is_direct_and_silent():
    assert route("http://127.0.0.1:8000", {"no": "localhost"}, ignore=False) == route(
        "http://127.0.0.1:8000", {}, ignore=True
    )
    assert route("http://127.0.0.1:8000", {}, ignore=False).note is None


@pytest.mark.parametrize(
    ("no_proxy", "target"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("example.com", "https://api.example.com"),
        (".example.com", "https://api.example.com/v1"),
        ("other, api.example.com", "https://api.example.com"),
        ("*", "http://anything:1"),
    ],
)
def test_route_no_proxy_match_connects_directly_and_says_so(no_proxy, target):
    decision = route(target, {"http": PROXY, "https": PROXY, "no": no_proxy}, ignore=False)
    assert decision.proxy is None
    assert decision.note is not None
    assert "NO_PROXY matches" in decision.note


def test_route_no_proxy_other_host_still_goes_through_the_proxy():
    decision = route("http://10.0.0.5:8000", {"http": PROXY, "no": "127.0.0.1,localhost,notexample.com"}, ignore=False)
    assert decision.proxy is not None


def test_route_ignore_proxy_env_connects_directly_and_names_the_variable():
    decision = route("http://10.0.0.5:8000", {"http": "socks5://bad"}, ignore=True)
    assert decision.proxy is None
    assert decision.note == "--ignore-proxy-env: HTTP_PROXY ignored; connecting to http://10.0.0.5:8000 directly"


def test_route_proxy_credentials_become_basic_auth_and_never_show():
    decision = route("http://10.0.0.5:8000", {"http": "http://al%40ice:s3%3Acret@proxy.local:8080/"}, ignore=False)
    proxy = decision.proxy
    assert proxy is not None
    assert (proxy.user, proxy.password) == ("al@ice", "s3:cret")
    assert proxy.public == "http://proxy.local:8080"
    shown = f"{proxy!r} {decision!r} {decision.note}"
    assert [s for s in ("al%40ice", "al@ice", "s3") if s in shown] == []


def test_choose_proxy_without_scheme_means_http_and_default_port():
    proxy = choose_proxy("http://10.0.0.5:8000", {"http": "proxy.local"})
    assert proxy is not None
    assert (proxy.public, proxy.port) == ("http://proxy.local", 80)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("socks5://u:secret@127.0.0.1:1080", "only http:// proxies"),
        ("https://u:secret@127.0.0.1:443", "only http:// proxies"),
        ("http://u:secret@127.0.0.1:99999", "invalid port"),
        ("http://u:secret@127.0.0.1:3128/some/path", "not a proxy address"),
    ],
)
def test_choose_proxy_unusable_url_names_variable_and_fix_without_credentials(value, problem):
    with pytest.raises(ConfigError) as info:
        choose_proxy("https://api.example.com", {"https": value})
    message = str(info.value)
    assert problem in message
    assert message.startswith("HTTPS_PROXY=")
    assert "--ignore-proxy-env" in message
    assert "secret" not in message


def test_route_reads_either_case_from_the_environment(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.setenv("no_proxy", "internal.example")
    env = urllib.request.getproxies_environment()
    assert route("https://api.example.com", env, ignore=False).proxy is not None
    assert route("https://x.internal.example", env, ignore=False).proxy is None

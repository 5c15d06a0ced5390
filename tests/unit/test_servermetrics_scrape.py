"""The scraping greenlet: endpoints, timeouts, failures (fake fetch, no network)."""

from __future__ import annotations

import time

import gevent
import pytest

from llmload.errors import ServerMetricsError
from llmload.servermetrics_scrape import ServerScraper, metrics_urls, routed_fetch


def vllm(prompt: int, gen: int, running: int = 0) -> str:
    return (
        f'vllm:prompt_tokens_total{{model_name="m"}} {prompt}\n'
        f'vllm:generation_tokens_total{{model_name="m"}} {gen}\n'
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
    )


class FakeFetch:
    """Answers each URL from its own list of bodies (the last one repeats); an exception is raised."""

    def __init__(self, answers: dict[str, list[object]], delay_s: float = 0.0) -> None:
        self.answers = answers
        self.delay_s = delay_s
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, url: str, headers, timeout_s: float) -> str:
        self.calls.append((url, dict(headers)))
        if self.delay_s:
            gevent.sleep(self.delay_s)
        queue = self.answers[url]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return str(answer)


AUTO = "http://127.0.0.1:8000/metrics"
DCGM = "http://127.0.0.1:9400/metrics"


@pytest.mark.parametrize(
    ("host", "setting", "expected"),
    [
        ("http://127.0.0.1:8000", "auto", (AUTO, ())),
        ("http://u:p@127.0.0.1:8000/v1", "auto", (AUTO, ())),
        ("http://127.0.0.1:8000", "off", (None, ())),
        ("http://127.0.0.1:8000", DCGM, (None, (DCGM,))),
        ("http://127.0.0.1:8000", f"auto,{DCGM}", (AUTO, (DCGM,))),
    ],
)
def test_metrics_urls(host, setting, expected):
    assert metrics_urls(host, setting) == expected


def test_scraper_deltas_from_start_to_finish_and_gauges_while_running():
    fetch = FakeFetch({AUTO: [vllm(100, 1000), vllm(150, 1500, running=4), vllm(160, 1600, running=8)]})
    scraper = ServerScraper(AUTO, (), model="m", headers={"Authorization": "Bearer k"}, fetch=fetch, interval_s=0.05)
    scraper.start()
    gevent.sleep(0.08)  # one periodic scrape
    section = scraper.finish()
    assert section is not None
    assert section["kind"] == "vllm"
    assert section["complete"] is True
    assert section["prompt_tokens"] == 60
    assert section["generation_tokens"] == 600
    assert section["gauges"]["running_requests"] == {"mean": 4.0, "max": 4.0, "samples": 1}
    assert fetch.calls[0] == (AUTO, {"Authorization": "Bearer k"})


def test_scraper_drops_a_target_without_metrics_and_says_so():
    fetch = FakeFetch({AUTO: [OSError("HTTP 404")]})
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=0.05)
    scraper.start()
    assert not scraper.active
    assert scraper.finish() is None
    assert "no Prometheus metrics at http://127.0.0.1:8000/metrics" in scraper.notes[0]
    assert len(fetch.calls) == 1  # tried once, never again


def test_scraper_drops_a_target_that_answers_html():
    fetch = FakeFetch({AUTO: ["<html>hi</html>"]})
    scraper = ServerScraper(AUTO, (), model=None, fetch=fetch)
    scraper.start()
    assert not scraper.active
    assert "not Prometheus text" in scraper.notes[0]


def test_scraper_hanging_endpoint_is_bounded_and_reported():
    fetch = FakeFetch({DCGM: ["DCGM_FI_DEV_GPU_UTIL 50\n"]}, delay_s=30.0)
    scraper = ServerScraper(None, (DCGM,), model=None, fetch=fetch, timeout_s=0.1, interval_s=60)
    began = time.monotonic()
    scraper.start()
    section = scraper.finish()
    assert time.monotonic() - began < 3.0  # two bounded scrapes, never the 30 s
    assert section is None  # it never answered
    assert scraper.active  # an extra URL is kept (and reported) even when it fails


def test_scraper_extra_endpoint_failing_mid_run_keeps_the_target_and_marks_incomplete():
    fetch = FakeFetch(
        {
            AUTO: [vllm(0, 0), vllm(10, 100)],
            DCGM: ["DCGM_FI_DEV_GPU_UTIL 50\n", ServerMetricsError("boom")],
        }
    )
    scraper = ServerScraper(AUTO, (DCGM,), model="m", fetch=fetch, interval_s=60, timeout_s=0.5)
    scraper.start()
    section = scraper.finish()
    assert section["generation_tokens"] == 100
    assert section["complete"] is False
    dcgm = section["endpoints"][1]
    assert dcgm == {"url": DCGM, "kind": "dcgm", "scrapes": 1, "failed_scrapes": 1, "error": "boom"}
    assert fetch.calls[1] == (DCGM, {})  # the target's credentials never go to another URL


def test_routed_fetch_makes_an_unusable_proxy_variable_that_urls_reported_failure(caplog):
    # HTTPS_PROXY is unusable (an https:// proxy) but applies only to the https extra URL
    proxies = {"https": "https://u:s3cret@proxy.example:3128", "http": "http://127.0.0.1:9", "no": "127.0.0.1"}
    fetch = routed_fetch((AUTO, "https://gpu.example/metrics"), proxies, ignore=False, insecure=False)
    with pytest.raises(
        ServerMetricsError, match=r"HTTPS_PROXY=https://proxy\.example:3128: only http:// proxies"
    ) as info:
        fetch("https://gpu.example/metrics", {}, 0.5)
    assert "s3cret" not in str(info.value)
    scraper = ServerScraper(None, ("https://gpu.example/metrics",), model="m", fetch=fetch, timeout_s=0.5)
    scraper.start()
    assert scraper.finish() is None  # the endpoint never answered: no server section, and not fatal
    assert "2 of 2 scrapes of https://gpu.example/metrics failed (last: HTTPS_PROXY=" in caplog.text

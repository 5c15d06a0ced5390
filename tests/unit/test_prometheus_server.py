"""exporters.prometheus_server: the /metrics server on loopback and the wait for a final scrape."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from llmload.aggregate.stats import LLMStats
from llmload.errors import ConfigError
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.testing import ok_record, spaced_s
from tests.unit.test_prometheus import FakeClock, _view


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def exporter():
    stats = LLMStats.empty()
    stats.add(ok_record(spaced_s(0.1, 0.01, 3), prompt_tokens=7))
    exporter = PrometheusExporter(lambda: _view(stats), registry=CollectorRegistry())
    port = exporter.start(0, "127.0.0.1")
    exporter.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield exporter
    exporter.stop()


def test_exporter_serves_metrics_in_text_format(exporter):
    status, body = _get(exporter.url + "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body)}
    ok = [s for s in families["llmload_requests"].samples if s.labels.get("outcome") == "ok"]
    assert ok[0].value == 1
    assert exporter.scrapes == 1


def test_exporter_answers_404_outside_metrics(exporter):
    status, body = _get(exporter.url + "/")
    assert status == 404
    assert "/metrics" in body
    assert exporter.scrapes == 0


def test_exporter_port_in_use_is_a_config_error_naming_the_fix(exporter):
    port = int(exporter.url.rsplit(":", 1)[1])
    other = PrometheusExporter(lambda: _view(LLMStats.empty()), registry=CollectorRegistry())
    with pytest.raises(ConfigError, match=rf"127\.0\.0\.1:{port}.*--prometheus-port 0 to disable"):
        other.start(port, "127.0.0.1")


def test_exporter_wait_returns_at_once_when_never_scraped():
    clock = FakeClock()
    exporter = PrometheusExporter(lambda: _view(LLMStats.empty()), registry=CollectorRegistry(), clock=clock)
    exporter.mark_final()
    assert exporter.wait_for_final_scrape(timeout_s=3600.0) is False


def test_exporter_wait_ends_with_the_first_scrape_after_final(exporter):
    _get(exporter.url + "/metrics")  # a scraper exists
    exporter.mark_final()
    scraper = threading.Timer(0.2, _get, args=(exporter.url + "/metrics",))
    scraper.start()
    try:
        assert exporter.wait_for_final_scrape(timeout_s=10.0) is True
    finally:
        scraper.join(5)
    assert exporter.scrapes == 2


def test_exporter_wait_times_out_without_a_scrape_after_final(exporter):
    _get(exporter.url + "/metrics")
    exporter.mark_final()
    assert exporter.wait_for_final_scrape(timeout_s=0.2) is False


def test_exporter_stop_releases_the_port(exporter):
    port = int(exporter.url.rsplit(":", 1)[1])
    exporter.stop()
    again = PrometheusExporter(lambda: _view(LLMStats.empty()), registry=CollectorRegistry())
    assert again.start(port, "127.0.0.1") == port
    again.stop()


@pytest.fixture
def clocked():
    """An exporter on loopback whose clock the test moves (scrapes are real HTTP requests)."""
    clock = FakeClock()
    exporter = PrometheusExporter(lambda: _view(LLMStats.empty()), registry=CollectorRegistry(), clock=clock)
    port = exporter.start(0, "127.0.0.1")
    exporter.url = f"http://127.0.0.1:{port}/metrics"  # type: ignore[attr-defined]
    yield exporter, clock
    exporter.stop()


def test_issue24_a_single_stray_scrape_is_not_waited_for(clocked):
    """One `curl /metrics` during the run used to keep a finished run up for the whole grace (60 s)."""
    exporter, clock = clocked
    _get(exporter.url)
    clock.now_s += 5.0
    exporter.mark_final()
    assert exporter.final_scrape_wait_s(60.0) == 0.0


def test_issue24_a_regular_scraper_is_waited_for_until_its_next_scrape_is_overdue(clocked):
    exporter, clock = clocked
    for _ in range(3):  # every 5 s
        _get(exporter.url)
        clock.now_s += 5.0
    exporter.mark_final()
    # the last scrape began 5 s ago; overdue at 2 x 5 s + 1 s after it
    assert exporter.final_scrape_wait_s(60.0) == pytest.approx(6.0)
    assert exporter.final_scrape_wait_s(3.0) == pytest.approx(3.0)  # never beyond the grace
    assert exporter.final_scrape_wait_s(0.0) == 0.0


def test_issue24_a_scraper_that_stopped_is_not_waited_for(clocked):
    exporter, clock = clocked
    for _ in range(2):
        _get(exporter.url)
        clock.now_s += 1.0
    clock.now_s += 10.0  # no scrape for 11 s: a 1 s scraper is gone
    exporter.mark_final()
    assert exporter.final_scrape_wait_s(60.0) == 0.0

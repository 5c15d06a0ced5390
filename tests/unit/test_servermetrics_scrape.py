"""The scraping greenlet: endpoints, timeouts, failures (fake fetch, no network)."""

from __future__ import annotations

import time
import urllib.error

import gevent
import pytest

from llmload.errors import ServerMetricsError
from llmload.net.scrape import ServerScraper, metrics_urls, routed_fetch


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
        if isinstance(answer, HangingAnswer):
            gevent.sleep(answer.seconds)
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
    scraper = ServerScraper(AUTO, (), model="m", headers={"Authorization": "Bearer k"}, fetch=fetch, interval_s=0.8)
    scraper.start()
    gevent.sleep(1.0)  # one periodic scrape (bounded by 0.2 s)
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
    assert "the answer is an HTML page, not the Prometheus text format: is it the /metrics path?" in scraper.notes[0]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ('{"object": "list"}', "the answer is JSON, not the Prometheus text format: is it the /metrics path?"),
        ("[1, 2]", "the answer is JSON, not the Prometheus text format"),
        ("hello world of it\n", "not the Prometheus text format (it began 'hello world of it')"),
    ],
    ids=["json-object", "json-list", "text"],
)
def test_server_metrics_kind_wrong_page_is_named_without_parser_details(answer, said):
    fetch = FakeFetch({AUTO: [answer]})
    scraper = ServerScraper(AUTO, (), model=None, fetch=fetch)
    scraper.start()
    assert not scraper.active
    assert said in scraper.notes[0]
    assert "Invalid" not in scraper.notes[0]


def test_server_metrics_kind_closed_port_says_connection_refused():
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    fetch = FakeFetch({AUTO: [refused]})
    scraper = ServerScraper(AUTO, (), model=None, fetch=fetch)
    scraper.start()
    assert f"connection refused at {AUTO}: is the server's metrics port right?" in scraper.notes[0]
    assert "urlopen" not in scraper.notes[0]


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


class Sink:
    """Records each interval's columns and when they came (s since the scraper's origin)."""

    def __init__(self, origin_s: float) -> None:
        self.origin_s = origin_s
        self.calls: list[tuple[int, float, dict]] = []

    def __call__(self, index: int, columns: dict) -> None:
        self.calls.append((index, time.perf_counter() - self.origin_s, columns))


def test_scraper_reads_at_each_interval_end_and_the_deltas_add_up_to_the_run():
    gens = [vllm(0, 0)] + [vllm(10 * i, 100 * i, running=i) for i in range(1, 6)]
    fetch = FakeFetch({AUTO: gens})
    origin = time.perf_counter()
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=0.6, origin_s=origin)
    sink = Sink(origin)
    scraper.follow(sink)
    scraper.start()
    gevent.sleep(1.5 - (time.perf_counter() - origin))  # rounds at 0.6 s (interval 0) and 1.2 s (interval 1)
    section = scraper.finish(final_index=2)
    assert [index for index, _, _ in sink.calls] == [0, 1, 2]
    for index, at_s, _ in sink.calls[:2]:
        assert (index + 1) * 0.6 <= at_s < (index + 1) * 0.6 + 0.3  # at the interval's end, within its bound
    gen = [cols["server_generation_tokens"] for _, _, cols in sink.calls]
    assert gen == [100, 100, 100]
    assert sum(gen) == section["generation_tokens"]
    assert [cols["server_running_requests"] for _, _, cols in sink.calls] == [1, 2, 3]
    assert scraper.periodic_timeout_s == pytest.approx(0.15)  # a quarter of the interval
    assert scraper.intervals.columns(1) == sink.calls[1][2]


def test_scraper_hanging_endpoint_never_delays_the_rounds_and_is_counted():
    fetch = FakeFetch({AUTO: [vllm(0, 0), vllm(5, 50), vllm(9, 90)], DCGM: [HangingAnswer(30.0)]})
    origin = time.perf_counter()
    scraper = ServerScraper(AUTO, (DCGM,), model="m", fetch=fetch, interval_s=0.8, timeout_s=0.2, origin_s=origin)
    sink = Sink(origin)
    scraper.follow(sink)
    scraper.start()  # bounded by timeout_s = 0.2 s (+ 0.1 s slack)
    gevent.sleep(1.8 - (time.perf_counter() - origin))
    section = scraper.finish(final_index=2)
    (index, at_s, cols), *_ = sink.calls
    assert index == 0
    assert at_s < 0.8 + 0.2 + 0.1 + 0.1  # the round's bound: 0.2 s timeout + 0.1 s slack (+ scheduling)
    assert cols["server_generation_tokens"] == 50  # the target's figures are there
    assert cols["server_scrape_failures"] == 1
    assert cols["server_scrape_s"] >= 0.2
    assert section["endpoints"][1]["failed_scrapes"] == 4  # start, two rounds, end
    (warning,) = scraper.warnings()
    assert warning.startswith(f"--server-metrics {DCGM} never answered with Prometheus text (4 scrape(s) failed")


def test_scraper_auto_target_without_metrics_gives_no_warning():
    fetch = FakeFetch({AUTO: [OSError("HTTP 404")]})
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch)
    scraper.start()
    assert scraper.finish() is None
    assert scraper.warnings() == []


def test_scraper_finish_keeps_the_round_under_way():
    fetch = FakeFetch({AUTO: [vllm(0, 0), vllm(1, 10), vllm(2, 20)]})
    origin = time.perf_counter()
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=0.8, origin_s=origin)
    sink = Sink(origin)
    scraper.follow(sink)
    scraper.start()
    fetch.delay_s = 0.1  # the round at 0.8 s takes 0.1 s (its bound is 0.2 s)
    gevent.sleep(0.84 - (time.perf_counter() - origin))
    scraper.finish(final_index=1)
    assert [(index, cols["server_generation_tokens"]) for index, _, cols in sink.calls] == [(0, 10), (1, 10)]


class HangingAnswer(BaseException):
    """Marker: FakeFetch sleeps this long instead of answering."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def test_scraper_restart_counts_the_server_from_the_reset_like_the_client():
    """Issue 24: RESET cleared llmload's client figures but the server block still counted from the
    run's start (its tokens, gauges and the client - server cross-check covered different requests)."""
    fetch = FakeFetch({AUTO: [vllm(100, 1000, running=9), vllm(150, 1500, running=9), vllm(170, 1800, running=2)]})
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=60)
    scraper.start()
    scraper.intervals.add(0, [])
    scraper.restart()  # RESET: read at 150 / 1500
    assert scraper.intervals.columns(0) is None  # the columns read before the reset are dropped
    section = scraper.finish(final_index=0)
    assert section is not None
    assert section["prompt_tokens"] == 20
    assert section["generation_tokens"] == 300
    columns = scraper.intervals.columns(0)
    assert columns is not None
    assert columns["server_generation_tokens"] == 300


def test_scraper_reset_window_is_in_the_section_and_explains_the_token_difference():
    """A RESET's new baseline is read over the network: requests the client finished meanwhile count on the
    client only. The CI run of 2026-12-03 had 47 client and 38 server requests since a RESET on a busy
    machine, with no word of why; the section now says how long the read took and what the client counted."""
    from llmload.servermetrics import cross_check

    fetch = FakeFetch({AUTO: [vllm(100, 1000), vllm(150, 1500), vllm(170, 1800)]})
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=60)
    scraper.start()
    section = ServerScraper(AUTO, (), model="m", fetch=FakeFetch({AUTO: [vllm(1, 1)]}), interval_s=60)
    section.start()
    assert (section.finish(final_index=0) or {})["reset"] is None  # no RESET, no window
    scraper.restart()
    scraper.note_reset(0.45, 9)
    done = scraper.finish(final_index=0)
    assert done is not None
    assert done["reset"] == {"baseline_after_s": 0.45, "client_succeeded_before_baseline": 9}
    check = cross_check(done, prompt_tokens=20, completion_tokens=390, ttft_mean_s=None, ttft_p50_s=None)
    assert "generation client +90 vs server" in str(check["tokens"])
    assert "9 request(s) finished between the RESET and the server's new baseline (0.45 s later)" in str(
        check["tokens"]
    )


def _big_page(lines: int = 4000) -> str:
    """A vLLM-like page of ``lines`` histogram bucket lines (a real server's page is 100-200 KB)."""
    body = [vllm(1, 1)]
    for i in range(lines):
        body.append(f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{0.001 * (i + 1):.3f}"}} {i}\n')
    body.append('vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4000\n')
    return "".join(body)


def test_parsing_a_big_page_lets_due_timers_and_other_greenlets_run_in_between():
    """The parse of one page yields to the event loop every slice: a 1 ms timer due during it fires before it ends.

    Parsing in one go (or yielding with gevent.sleep(0), which resumes before the loop runs timers or polls
    sockets) would hold every user's due send and unread socket for the whole parse, once per interval.
    """
    page = _big_page()
    order: list[str] = []

    def timer() -> None:
        gevent.sleep(0.001)
        order.append("timer")

    def scrape() -> None:
        scraper = ServerScraper(AUTO, (), model="m", fetch=FakeFetch({AUTO: [page]}), interval_s=10.0)
        scraper.start()  # the reading before the load
        scraper.finish()
        order.append("parsed")

    began = time.perf_counter()
    gevent.joinall([gevent.spawn(timer), gevent.spawn(scrape)], timeout=30)
    parse_s = time.perf_counter() - began
    assert parse_s > 0.01, "the page parsed too fast to tell; make it bigger"  # the premise, not a speed target
    assert order == ["timer", "parsed"]


def test_scraper_says_which_interval_is_being_read_until_its_columns_are_handed_over():
    """The CI failure of 2026-12-01: the time series wrote a row without its server columns while the
    page was still being parsed (the parse is paced and unbounded), so the file and the results differed."""
    fetch = FakeFetch({AUTO: [vllm(0, 0), vllm(1, 10), vllm(2, 20)]})
    origin = time.perf_counter()
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=0.5, origin_s=origin)
    seen: list[tuple[int, bool]] = []
    scraper.follow(lambda index, _cols: seen.append((index, scraper.reading(index))))
    scraper.start()
    assert not scraper.reading(0)
    fetch.delay_s = 0.2  # the round at 0.5 s answers at 0.7 s
    gevent.sleep(0.6 - (time.perf_counter() - origin))
    assert scraper.reading(0)
    assert scraper.reading(1)  # interval 1's round comes after this one
    gevent.sleep(0.8 - (time.perf_counter() - origin))
    assert not scraper.reading(0)  # handed over
    assert not scraper.reading(1)  # its round has not begun: nothing under way
    scraper.finish(final_index=1)
    assert seen[0] == (0, True)  # the sink is called while the round is still under way


def test_scraper_restart_waits_for_the_periodic_round_under_way():
    """A RESET during a periodic round: the round's page (answered before the RESET) must not become the new
    baseline, or the server counts requests the client's reset dropped (the RESET run's server count was
    above the client's under coverage, where parsing a page takes long)."""
    fetch = FakeFetch({AUTO: [vllm(0, 0), vllm(1, 10), vllm(2, 20), vllm(3, 30)]})
    origin = time.perf_counter()
    scraper = ServerScraper(AUTO, (), model="m", fetch=fetch, interval_s=1.0, origin_s=origin)
    scraper.start()
    fetch.delay_s = 0.2  # the round at 1.0 s answers at 1.2 s (within its 0.25 s bound)
    gevent.sleep(1.1 - (time.perf_counter() - origin))
    assert scraper.reading(0)
    scraper.restart()  # RESET at 1.1 s: reads after the round, at 1.4 s
    fetch.delay_s = 0.0
    section = scraper.finish(final_index=1)
    assert section is not None
    assert section["generation_tokens"] == 10  # 30 - 20: from the RESET's own read

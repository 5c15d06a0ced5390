"""Arrival times from the kernel's receive stamps: which clock timed a read, and how late the client was."""

from __future__ import annotations

import gc
import itertools
import sys
import time
from dataclasses import dataclass

import gevent
import gevent.monkey
import pytest

from llmload.exporters.console import summary_lines
from llmload.exporters.results import RunOutcome, build_results
from llmload.net.transport import GeventHTTPTransport, GeventResponse
from llmload.net.turns import PACE_MAX_NS, PACE_NS, POLL_TICK_S, LoopTurns
from llmload.request.client import StreamingClient
from llmload.request.payloads import LLMRequest, build_completion_request
from llmload.request.record import Outcome, RequestRecord
from llmload.settings.config import Timeouts
from llmload.testing import T0_UNIX, TF, Reply, ScriptedServer, T, W, json_reply, ok_record, sse, stats_of
from tests.conftest import SendClock

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timing,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS receive stamps are Linux only"),
]

REQUEST = build_completion_request(model="m", prompt="count", max_tokens=4)
FAST = Timeouts(connect_s=2, idle_s=5, total_s=30)
# the real time.sleep even where gevent patched the time module: it blocks the whole loop
_block_loop = gevent.monkey.get_original("time", "sleep")


@dataclass(frozen=True)
class HeldRun:
    record: RequestRecord
    held_until_s: float  # when the test let the loop go, seconds after the send
    first_write_s: float  # when the server sent its first write, seconds after the send
    writes_s: list[float]  # when the server sent each write, seconds after the send


def _run_with_the_loop_held(reply: Reply, request: LLMRequest, hold_s: float) -> HeldRun:
    """Send ``request``, then hold the whole loop for ``hold_s`` (the client cannot read meanwhile).

    Times are seconds after the client's own send time (after its connect), as the record's are.
    """
    clock = SendClock()
    with ScriptedServer(reply) as server:
        client, transport = _client(server, clock)
        runner = gevent.spawn(client.run, request)
        # hold once the server has the request (the client then waits for the reply): a fixed
        # sleep is not enough on a busy machine, where the connect alone can take 20 ms
        deadline = time.monotonic() + 5
        while not server.requests and time.monotonic() < deadline:
            gevent.sleep(0.001)
        assert server.requests, "the request did not reach the server within 5 s"
        _block_loop(hold_s)
        held_until = time.perf_counter()
        record = runner.get(timeout=5)
        sent = clock.send_s(record)
        writes_s = [at - sent for at in server.send_log(0).writes_s]
    transport.close()
    return HeldRun(record, held_until - sent, writes_s[0], writes_s)


def _client(server: ScriptedServer, clock: SendClock | None = None) -> tuple[StreamingClient, GeventHTTPTransport]:
    transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST)
    return StreamingClient(transport, clock=clock or time.perf_counter, keep_text=True), transport


def _run(reply: Reply) -> RequestRecord:
    """One request against ``reply``, the loop free to read."""
    with ScriptedServer(reply) as server:
        client, transport = _client(server)
        record = client.run(REQUEST)
    transport.close()
    return record


def test_kernel_stamps_time_every_body_read(gevent_ready):
    reply = Reply([W(20, sse(T("a"))), W(40, sse(T(" b"))), W(60, sse(TF("length"), "[DONE]"))])
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert record.unstamped_reads == 0
    assert len(record.read_lags_s) >= 3  # one per write: the client kept up
    # the last write holds the finish and [DONE], which has no time of its own: one timed event
    assert all(0.0 <= lag < 0.02 for lag in record.read_lags_s)
    results = build_results(RunOutcome(stats_of(record)))
    assert results["client"]["clock"] == "kernel"
    assert results["client"]["stamped_reads"] == len(record.read_lags_s)
    assert results["client"]["read_lag_s"]["count"] == len(record.read_lags_s)


def test_first_token_in_the_same_segment_as_the_headers_is_kernel_stamped(gevent_ready):
    # headers and the first token leave the server in one write (pywsgi and others do this)
    reply = Reply([W(50, sse(T("a"))), W(70, sse(TF("length"), "[DONE]"))], headers_at_ms=50)
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert record.unstamped_reads == 0
    assert record.ttft_s == pytest.approx(0.05, abs=0.015)


def test_a_blocked_client_still_times_the_reply_when_it_arrived(gevent_ready):
    # The first token arrives at 100 ms while the test holds the whole loop until
    # ~400 ms; the next write comes at 600 ms, after the client is reading again.
    reply = Reply([W(100, sse(T("a"))), W(600, sse(TF("length"), "[DONE]"))])
    run = _run_with_the_loop_held(reply, REQUEST, 0.4)
    record, arrived_s = run.record, run.first_write_s
    assert record.outcome is Outcome.OK
    assert run.held_until_s > 0.35
    ttft_s = record.ttft_s
    assert ttft_s is not None
    # the user-space read came ~300 ms late; the stamp says when the token arrived
    assert ttft_s == pytest.approx(arrived_s, abs=0.03)
    # each read held one event and its own stamp: no time is off, however late the read came,
    # so the lag (a bound of the error, not of the lateness) stays small and nothing is flagged
    assert max(record.read_lags_s) < 0.005
    results = build_results(RunOutcome(stats_of(record)))
    assert results["client"]["read_lag_saturated"] is False


def test_a_whole_reply_that_came_with_the_headers_is_kernel_stamped(gevent_ready):
    # The whole stream is in the kernel before the client reads the headers (its loop is
    # held): geventhttpclient releases the connection with the headers, the stamp stays.
    reply = Reply([W(50, sse(T("a"), TF("length"), "[DONE]"))], headers_at_ms=50)
    run = _run_with_the_loop_held(reply, REQUEST, 0.2)
    record, arrived_s = run.record, run.first_write_s
    assert record.outcome is Outcome.OK
    assert record.unstamped_reads == 0
    assert record.ttft_s == pytest.approx(arrived_s, abs=0.03)
    assert record.read_lags_s
    # the read holds several events, and the socket was last known empty at the send, 50 ms
    # before the stamp: the lag covers that; the ~150 ms the read then waited is no error
    assert 0.045 < max(record.read_lags_s) < 0.1


def test_a_whole_json_reply_is_timed_when_it_arrived(gevent_ready):
    body = (
        '{"choices":[{"index":0,"text":" yes","finish_reason":"length"}],'
        '"usage":{"prompt_tokens":1,"completion_tokens":1}}'
    )
    request = build_completion_request(model="m", prompt="count", max_tokens=4, stream=False)
    run = _run_with_the_loop_held(json_reply(200, body, at_ms=50), request, 0.2)
    record, arrived_s = run.record, run.first_write_s
    assert record.outcome is Outcome.OK
    assert record.e2e_s == pytest.approx(arrived_s, abs=0.03)
    assert record.unstamped_reads == 0


def test_a_connection_the_server_closed_while_idle_is_reopened_before_the_send_time(gevent_ready):
    # llama-server closes after every streamed reply: opening the next connection is
    # connect_s, not part of the next request's TTFT.
    reply = Reply([W(20, sse(T("a"), TF("length"), "[DONE]"))], close_after_ms=1)
    with ScriptedServer([reply, reply]) as server:
        client, transport = _client(server)
        first = client.run(REQUEST)
        gevent.sleep(0.05)  # the server has hung up by now
        second = client.run(REQUEST)
        connections = server.connections_accepted
    transport.close()
    assert [first.outcome, second.outcome] == [Outcome.OK, Outcome.OK]
    assert connections == 2
    assert second.connect_s is not None
    assert second.connect_s > 20e-6  # a real connect, not the kept-alive shortcut
    assert second.ttft_s == pytest.approx(0.02, abs=0.01)


def test_issue19_scripted_runs_time_the_server_from_the_clients_send_after_connect(run_scripted):
    # The client starts a request's clock on the ready connection, connect_s after its first
    # clock reading. A slow connect (30 ms here; a busy machine or a resolver thread gives
    # several ms) must shift neither side: the client's times match the server's send times.
    reply = Reply([W(40, sse(T("a"))), W(60, sse(TF("length"), "[DONE]"))])
    run = run_scripted(reply, REQUEST, connect_delay_s=0.03)
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.connect_s is not None
    assert record.connect_s >= 0.03
    assert record.ttft_s == run.at(40)
    assert record.end_s == run.at(60)


def test_issue19_a_read_that_ends_inside_a_later_event_keeps_a_lag_that_covers_its_first_event(gevent_ready):
    # The first token arrives at 60 ms and the start of the next event at 95 ms, both while
    # the loop is held; the loop is let go at ~110 ms. One read returns the whole first event
    # and the later event's first bytes, stamped at 95 ms (the newest segment): the first
    # token is timed ~35 ms late, while the read's age is only ~15 ms. A read that completes
    # one event is not that event's own stamp when it carries bytes past it: its lag must
    # cover the first event's wait, not just the age of the newest bytes.
    second = sse(T(" b"))
    cut = second.index(b'"text"')
    reply = Reply([W(60, sse(T("a"))), W(95, second[:cut]), W(300, second[cut:] + sse(TF("length"), "[DONE]"))])
    run = _run_with_the_loop_held(reply, REQUEST, 0.11)
    record = run.record
    assert record.outcome is Outcome.OK
    assert run.writes_s[1] < run.held_until_s < run.writes_s[2]  # both first writes queued behind the hold
    ttft_s = record.ttft_s
    assert ttft_s is not None
    error_s = ttft_s - run.writes_s[0]
    assert error_s > -0.001  # late at worst (the newest segment's stamp), never early
    assert record.token_times_s[0] == ttft_s
    assert record.read_lags_s[0] >= error_s  # the first body read timed the first token: its lag bounds the error


def test_issue19_the_lag_of_events_queued_behind_a_held_loop_covers_the_hold(gevent_ready):
    # Four events arrive 20 ms apart while the test holds the client's loop until ~400 ms:
    # they queue in the kernel, which merges them into one buffer stamped with the newest
    # segment. The first token's time is then that stamp (up to 60 ms late), and the lag
    # of the read must cover how far before the stamp its oldest byte may have arrived.
    reply = Reply(
        [
            W(100, sse(T("a"))),
            W(120, sse(T(" b"))),
            W(140, sse(T(" c"))),
            W(160, sse(T(" d"))),
            W(600, sse(TF("length"), "[DONE]")),
        ]
    )
    run = _run_with_the_loop_held(reply, build_completion_request(model="m", prompt="count", max_tokens=5), 0.4)
    record = run.record
    assert record.outcome is Outcome.OK
    assert run.held_until_s > 0.35
    writes = run.writes_s
    assert len(record.token_times_s) == 4
    ttft_s = record.ttft_s
    assert ttft_s is not None
    error_s = ttft_s - writes[0]
    assert error_s > -0.005
    # the lag bounds the error of every time the read gave: it covers the 60 ms from the first
    # queued event to the stamp (the newest), not the ~240 ms the read then waited
    assert max(record.read_lags_s) >= error_s
    assert max(record.read_lags_s) >= writes[3] - writes[0] - 0.005
    assert max(record.read_lags_s) < run.held_until_s - writes[0] - 0.1
    results = build_results(RunOutcome(stats_of(record)))
    assert results["client"]["read_lag_saturated"] is True


def test_issue19_one_request_held_among_many_read_in_time_sets_client_saturated_and_warns(gevent_ready):
    # Five events queue in the kernel while the test holds the client's loop 150 ms. Among
    # 300 requests read in time the P99 read lag stays low, yet this request's TTFT may be
    # far off: the first token gets its own arrival time within 1 ms or the request's lag
    # covers the hold, and either way the run is flagged and the summary warns.
    reply = Reply([W(60 + 10 * i, sse(T(f" t{i}"))) for i in range(5)] + [W(400, sse(TF("length"), "[DONE]"))])
    run = _run_with_the_loop_held(reply, build_completion_request(model="m", prompt="count", max_tokens=6), 0.15)
    record = run.record
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 5
    ttft_s = record.ttft_s
    assert ttft_s is not None
    assert run.held_until_s > run.writes_s[4]  # every token event queued behind the hold
    own_time = abs(ttft_s - run.writes_s[0]) <= 0.001
    lag_s = max(record.read_lags_s)
    assert own_time or lag_s >= run.held_until_s - run.writes_s[0] - 0.005
    assert lag_s >= ttft_s - run.writes_s[0]
    in_time = []
    for _ in range(300):
        fine = ok_record(start_unix=T0_UNIX, times_s=(0.05, 0.06), end_s=0.07)
        fine.read_lags_s = [0.0002, 0.0003, 0.0002]
        in_time.append(fine)
    results = build_results(RunOutcome(stats_of(record, *in_time)))
    client = results["client"]
    assert client["read_lag_s"]["p99"] < 0.002
    assert client["lagged_requests"] == 1
    assert client["request_lag_s"]["max"] == pytest.approx(lag_s)
    assert results["client_saturated"] is True
    text = "\n".join(summary_lines(results))
    assert "1 request(s) may have TTFT, ITL or E2E off by up to" in text
    assert "1 of 301" in text


def test_issue19_two_token_events_in_one_write_count_from_when_the_socket_was_empty(gevent_ready):
    # The server writes two token events at once 30 ms after the previous one: the client
    # cannot tell them from two writes merged by the kernel, so the lag of that read counts
    # from when the socket was last known empty (at most the 30 ms since the previous read).
    reply = Reply([W(20, sse(T("a"))), W(50, sse(T(" b"), T(" c"))), W(60, sse(TF("length"), "[DONE]"))])
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert len(record.read_lags_s) >= 3
    assert record.read_lags_s[0] < 0.02
    assert 0.0 <= record.read_lags_s[1] < 0.045


def test_issue19_one_idle_user_whose_reads_hold_two_events_is_not_called_a_late_client(gevent_ready):
    # One user on an idle machine; the server's first write after 40 ms holds two events (a
    # role-only delta and the first token, as vLLM and the simulator send them), and so does
    # each later one. Such a read cannot be told from two segments merged by the kernel, so
    # its lag counts from when the socket was last known empty: the loop's last poll that did
    # not find it readable. Without a poll in between (a loop blocked in one poll since the
    # headers) that was the headers, 40 ms before, and every such run was flagged as a late
    # client; the poll tick bounds it.
    pair = sse(T(""), T("a"))
    reply = Reply([W(40, pair), W(80, sse(T(" b"), T(" c"))), W(120, sse(TF("length"), "[DONE]"))])
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert len(record.read_lags_s) >= 2
    assert record.ttft_s is not None
    assert record.ttft_s > 0.035
    assert max(record.read_lags_s[:2]) < 2 * POLL_TICK_S + 0.003  # the tick, the wake-up and the read
    results = build_results(RunOutcome(stats_of(record)))
    assert results["client_saturated"] is False
    assert "late" not in "\n".join(summary_lines(results))


def test_issue19_headers_that_come_with_two_events_after_a_long_wait_are_not_called_a_late_client(gevent_ready):
    # As the simulator and many servers do: the headers wait for the first token and leave in
    # one write with it and a role-only delta, 40 ms after the send. Those body bytes are read
    # through the header receive; their lag counts from the loop's last empty poll during that
    # wait, not from the send (which made every such first read 40 ms "late").
    reply = Reply(
        [W(40, sse(T(""), T("a"))), W(80, sse(T(" b"), T(" c"))), W(120, sse(TF("length"), "[DONE]"))], headers_at_ms=40
    )
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert record.ttft_s is not None
    assert record.ttft_s > 0.035
    assert len(record.read_lags_s) >= 2
    assert max(record.read_lags_s) < 2 * POLL_TICK_S + 0.003  # the tick, the wake-up and the read
    results = build_results(RunOutcome(stats_of(record)))
    assert results["client_saturated"] is False
    assert "late" not in "\n".join(summary_lines(results))


def test_issue19_one_event_per_read_keeps_the_lag_of_its_stamp(gevent_ready):
    # The client keeps up: every read holds one event, its stamp is its arrival, the lag is small.
    reply = Reply([W(20, sse(T("a"))), W(40, sse(T(" b"))), W(60, sse(T(" c"))), W(80, sse(TF("length"), "[DONE]"))])
    record = _run(reply)
    assert record.outcome is Outcome.OK
    assert len(record.read_lags_s) >= 4
    assert all(0.0 <= lag < 0.005 for lag in record.read_lags_s[:3])


def test_issue19_loop_turns_say_a_socket_waited_on_since_before_the_last_poll_got_bytes_after_it(gevent_ready):
    turns = LoopTurns()
    turns.start()
    try:
        wait_ns = time.time_ns()
        for _ in range(3):
            gevent.sleep(0.002)  # loop iterations: each poll's return is noted
        assert wait_ns < turns.prev_check_ns <= turns.check_ns
        # waited since before the previous poll returned: the bytes came after it
        assert turns.floor_ns(wait_ns) == turns.prev_check_ns
        # began waiting after it: the polls say nothing
        assert turns.floor_ns(time.time_ns()) == 0
    finally:
        turns.close()
    noted = turns.check_ns
    gevent.sleep(0.002)
    assert turns.check_ns == noted == 0  # closed: no longer noted


class _HoldAfterPoll(LoopTurns):
    """Loop turns that, once armed, hold the loop right after noting a poll: as other users' replies
    handled in the same iteration, before the client's greenlet runs."""

    hold_s = 0.0

    def _checked(self) -> None:
        super()._checked()
        hold_s, self.hold_s = self.hold_s, 0.0
        if hold_s:
            _block_loop(hold_s)


def test_issue19_a_first_token_queued_behind_later_ones_is_timed_by_the_poll_that_found_it(gevent_ready):
    # The first token arrives while the loop is held (hold 1: a busy process's previous
    # iteration); the next poll finds the socket readable, and the iteration's other work
    # holds the loop again before the client's greenlet runs (hold 2) while the next tokens
    # arrive. The kernel merges them all into one buffer stamped with the newest segment; the
    # first token is timed no later than the poll that found it (the end of hold 1), not by
    # that newest stamp, and the later ones keep the stamp.
    reply = Reply([W(150 + 30 * i, sse(T(f" t{i}"))) for i in range(4)] + [W(500, sse(TF("length"), "[DONE]"))])
    request = build_completion_request(model="m", prompt="count", max_tokens=5)
    clock = SendClock()
    turns = _HoldAfterPoll()
    with ScriptedServer(reply) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        client = StreamingClient(transport, clock=clock)
        runner = gevent.spawn(client.run, request)
        deadline = time.monotonic() + 5
        while not server.requests and time.monotonic() < deadline:
            gevent.sleep(0.001)
        assert server.requests, "the request did not reach the server within 5 s"
        while server.send_log(0).headers_s is None and time.monotonic() < deadline:
            gevent.sleep(0.001)
        gevent.sleep(0.05)  # the client reads the headers and waits for the body
        hold1_from = time.perf_counter()
        while not server.send_log(0).writes_s and time.monotonic() < deadline:  # hold 1
            _block_loop(0.001)
        _block_loop(0.005)
        held1_until = time.perf_counter()
        turns.hold_s = 0.2  # hold 2, after the next poll
        record = runner.get(timeout=5)
        sent = clock.send_s(record)
        writes_s = [at - sent for at in server.send_log(0).writes_s]
    transport.close()
    turns.close()
    assert record.outcome is Outcome.OK
    assert record.headers_s is not None
    assert record.headers_s < hold1_from - sent  # the first token was the first body byte after hold 1
    assert len(record.token_times_s) == 4
    ttft_s = record.ttft_s
    assert ttft_s is not None
    assert writes_s[3] < held1_until - sent + 0.2  # the other tokens were written during hold 2
    assert ttft_s >= writes_s[0] - 0.0005  # never early
    assert ttft_s <= held1_until - sent + 0.002  # no later than the poll after hold 1
    assert record.token_times_s[1] >= writes_s[3] - 0.0005  # the later tokens keep the newest stamp
    assert max(record.read_lags_s) >= record.token_times_s[1] - writes_s[0] - 0.005  # the lag still covers


def test_issue19_greenlets_past_the_turn_budget_go_on_in_order_one_poll_at_a_time(gevent_ready):
    # Three users each have 3 ms of work before and after the check, against a 1 ms budget:
    # each queues, and after each later poll the gate lets the oldest go (at least one per
    # iteration, more only while the iteration is within the budget), so an iteration holds
    # one user's work and the loop polls between them. A user within the budget goes on at once.
    turns = LoopTurns()
    turns.start()
    resumed: list[tuple[int, int, int]] = []  # (user, check_ns when it queued, check_ns when it went on)
    try:
        gevent.sleep(0.002)  # a poll noted

        def user(i: int) -> None:
            _block_loop(0.003)
            queued_at = turns.check_ns
            turns.yield_if_turn_over(1_000_000)
            resumed.append((i, queued_at, turns.check_ns))
            _block_loop(0.003)

        gevent.joinall([gevent.spawn(user, i) for i in range(3)], timeout=5, raise_error=True)
        assert [i for i, _, _ in resumed] == [0, 1, 2]  # in order
        checks = [went for _, _, went in resumed]
        assert all(went > queued for _, queued, went in resumed)  # each waited for a later poll
        assert len(set(checks)) == 3  # one user per iteration: the loop polled between them
        gevent.sleep(0.002)
        before = turns.check_ns
        turns.yield_if_turn_over(1_000_000)  # just after a poll: within the budget
        assert turns.check_ns == before
    finally:
        turns.close()


def test_the_request_clock_starts_when_the_request_goes_to_the_kernel_not_while_it_is_built(gevent_ready):
    # The client's loop stalls 30 ms between taking its send time and the send (building the
    # request, or a garbage collection meanwhile): TTFT starts at the send the server saw, and
    # the stall is the client's delay before the send (connect_s), as the wire would show.
    reply = Reply([W(50, sse(T("a"))), W(70, sse(TF("length"), "[DONE]"))])
    with ScriptedServer(reply) as server:
        client, transport = _client(server)
        build = transport._client._build_request

        def slow_build(*args, **kwargs):  # type: ignore[no-untyped-def]
            _block_loop(0.03)
            return build(*args, **kwargs)

        transport._client._build_request = slow_build
        record = client.run(REQUEST)
    transport.close()
    assert record.outcome is Outcome.OK
    assert record.ttft_s == pytest.approx(0.05, abs=0.01)
    assert record.connect_s is not None
    assert record.connect_s >= 0.03


def test_issue19_a_user_busy_elsewhere_does_not_delay_the_receives_each_event_keeps_its_own_stamp(gevent_ready):
    # Five events 10 ms apart while the user greenlet is away for 100 ms (the loop runs): the loop
    # receives each as it arrives, so every read the user gets later holds one event, timed by its
    # own stamp (lag 0). A user that received its own bytes would read all five merged under the
    # newest stamp.
    writes = [W(20 + 10 * i, sse(T(f" t{i}"))) for i in range(5)]
    with ScriptedServer(Reply([*writes, W(120, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST)
        response = transport.post("/v1/completions", b"{}", {})
        gevent.sleep(0.1)  # the user is away; the loop is free
        arrivals_s: list[float] = []
        lags_s: list[float] = []
        reads: list[bytes] = []
        while data := response.read_some():
            arrivals_s.append(time.perf_counter() - response.read_age_s)
            lags_s.append(response.read_lag_s)
            reads.append(data)
        response.close()
        transport.close()
        log = server.send_log(0)
    assert reads[:5] == [sse(T(f" t{i}")) for i in range(5)]  # one event per receive
    for arrived_s, written_s in zip(arrivals_s[:5], log.writes_s[:5], strict=True):
        assert arrived_s == pytest.approx(written_s, abs=0.001)
    # no byte of these reads queued behind another: the lag bound stays the loop's poll spacing
    assert max(lags_s[:5]) < 2 * POLL_TICK_S + 0.001


def test_issue19_the_user_is_woken_for_the_end_of_the_body_not_for_every_token(gevent_ready):
    # Twenty events 2 ms apart, then the end: the user waiting for them is woken once (at the end of
    # the body, within BATCH_READS and BATCH_S), and gets every event with the time it arrived. (A
    # machine that holds the process for a few ms merges some events into one receive: that one is
    # timed by its newest event, and its lag covers the older ones.)
    writes = [W(20 + 2 * i, sse(T(f" t{i}"))) for i in range(20)]
    with ScriptedServer(Reply([*writes, W(70, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST)
        response = transport.post("/v1/completions", b"{}", {})
        returned_s: list[float] = []
        reads: list[tuple[int, float, float]] = []  # events in the read, its arrival, its lag
        while data := response.read_some():
            now = time.perf_counter()
            returned_s.append(now)
            reads.append((data.count(b"data: "), now - response.read_age_s, response.read_lag_s))
        response.close()
        transport.close()
        log = server.send_log(0)
    assert returned_s[-1] - returned_s[0] < 0.005  # handed out together, after the last one arrived
    assert returned_s[0] >= log.writes_s[-1] - 0.001
    first = 0
    for events, arrived_s, lag_s in reads:
        if first >= 20:
            break
        newest = min(first + events, 20) - 1
        assert arrived_s == pytest.approx(log.writes_s[newest], abs=0.001)
        assert arrived_s - log.writes_s[first] <= lag_s + 0.001  # merged: the lag covers the oldest
        first += events
    assert sum(events for events, _, _ in reads) == 22  # every event, the finish and [DONE]


def test_issue19_read_within_returns_at_the_first_bytes_not_after_the_batch_time(gevent_ready):
    with ScriptedServer(Reply([W(50, sse(T("a"))), W(400, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST)
        response = transport.post("/v1/completions", b"{}", {})
        data = response.read_within(1.0)
        returned_s = time.perf_counter()
        nothing = response.read_within(0.05)  # the next write is 350 ms away: None, the body stays open
        response.close()
        transport.close()
        log = server.send_log(0)
    assert data == sse(T("a"))
    assert log.writes_s[0] <= returned_s < log.writes_s[0] + 0.01
    assert nothing is None


class _NotedPolls(LoopTurns):
    """Loop turns that keep every poll's return (CLOCK_REALTIME ns) and how many users waited for bytes then."""

    def __init__(self) -> None:
        super().__init__()
        self.polls: list[tuple[int, int]] = []

    def _checked(self) -> None:
        super()._checked()
        self.polls.append((self.check_ns, self.waiting))


def test_issue19_while_a_user_waits_for_bytes_polls_are_paced_half_a_millisecond_apart(gevent_ready):
    # 200 segments 0.1 ms apart: without pacing nearly every one would wake the loop on its own; with
    # it, while the body is received, one poll's return follows the last by PACE_NS at least.
    writes = [W(20 + 0.1 * i, sse(T(f" t{i}"))) for i in range(200)]
    turns = _NotedPolls()
    with ScriptedServer(Reply([*writes, W(60, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        record = StreamingClient(transport).run(build_completion_request(model="m", prompt="p", max_tokens=201))
        transport.close()
    turns.close()
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 200
    paced = [(now - before) for (before, waiting), (now, _) in itertools.pairwise(turns.polls) if waiting > 0]
    assert len(paced) >= 20
    assert min(paced) >= PACE_NS - 60_000  # a sleep under 50 µs is skipped; the clock reads around it


def _held_polls(writes: list[W], end_ms: float) -> tuple[RequestRecord, list[float], list[int]]:
    """One streamed reply of ``writes`` (a token each) then its end: the record, each token's write time
    (the client's clock) and the time from each poll's return to the next while the user waited for bytes."""
    turns = _NotedPolls()
    clock = SendClock()
    with ScriptedServer(Reply([*writes, W(end_ms, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        client = StreamingClient(transport, clock=clock, keep_text=True)
        gc.disable()  # a full collection late in a long session can pause for >5 ms
        try:
            record = client.run(build_completion_request(model="m", prompt="p", max_tokens=len(writes)))
        finally:
            gc.enable()
        transport.close()
        log = server.send_log(0)
    turns.close()
    # the server's perf_counter is the client's (one process): each write's time after the client's send
    written_s = [written - clock.send_s(record) for written in log.writes_s[: len(writes)]]
    held = [(now - before) for (before, waiting), (now, _) in itertools.pairwise(turns.polls) if waiting > 0]
    return record, written_s, held


def test_issue19_tokens_10_ms_apart_let_the_loop_hold_its_polls_longest_each_token_timed_on_its_own(gevent_ready):
    # Forty tokens 10 ms apart: once the loop has seen their gaps, it holds each poll PACE_MAX_NS
    # (a quarter of 10 ms is past it), fewer wake-ups than PACE_NS; every token is still received
    # on its own and timed by its own stamp. Without the gap-led hold, the holds are PACE_NS.
    writes = [W(20 + 10 * i, sse(T(f" t{i}"))) for i in range(40)]
    record, written_s, held = _held_polls(writes, 430)
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(f" t{i}" for i in range(40))
    assert sorted(held)[len(held) // 2] >= PACE_MAX_NS - 100_000, held[:20]
    for arrived_s, sent_s in zip(record.token_times_s, written_s, strict=True):
        assert arrived_s == pytest.approx(sent_s, abs=0.001)
    assert record.read_lags_s == [0.0] * len(record.read_lags_s)  # one event per receive, each its own stamp


def test_issue19_a_fast_stream_keeps_its_first_tokens_apart_no_gap_seen_is_the_shortest_hold(gevent_ready):
    # Thirty tokens 0.7 ms apart from the first: a reply's first receive has no gap to note, so the
    # loop holds PACE_NS until the second, and no token shares a read with the next. (The first
    # receive counted as a gap since the epoch made the first hold PACE_MAX_NS: the second token
    # merged with the third, 1.4 ms late.)
    writes = [W(20 + 0.7 * i, sse(T(f" t{i}"))) for i in range(30)]
    record, written_s, _held = _held_polls(writes, 60)
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(f" t{i}" for i in range(30))
    for i, (arrived_s, sent_s) in enumerate(zip(record.token_times_s, written_s, strict=True)):
        assert arrived_s == pytest.approx(sent_s, abs=0.001), i  # (a 2 ms first hold: the 2nd 1.3 ms late)


def test_issue19_a_server_that_writes_two_events_at_once_keeps_the_loops_hold_shortest(gevent_ready):
    # Twenty writes 10 ms apart, two tokens each (as a server with several tokens per step sends
    # them). A read of two events cannot be told from two segments merged while the loop held, and
    # its lag spans the whole hold: with a 2 ms hold (a quarter of 10 ms, capped) every such read
    # would be 2 ms "lagged", over the read-lag limit on an idle machine. The reader says so and the
    # loop holds PACE_NS; the lags stay well under the limit.
    writes = [W(20 + 10 * i, sse(T(f" a{i}"), T(f" b{i}"))) for i in range(20)]
    record, _written_s, held = _held_polls(writes, 230)
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(f" a{i} b{i}" for i in range(20))
    assert build_results(RunOutcome(stats_of(record)))["client_saturated"] is False  # (held 2 ms: flagged)
    assert sorted(held)[len(held) // 2] < PACE_NS + 300_000, held[:20]


def test_issue19_a_stream_that_speeds_up_shortens_the_hold_within_a_poll(gevent_ready):
    # Ten tokens 10 ms apart (holds of PACE_MAX_NS), then forty 1 ms apart. The last slow one and the
    # first fast ones may share a receive (held 2 ms), whose gap from the last is shorter than the hold:
    # the next hold is PACE_NS, and from there each token is received on its own. Those that shared one
    # are timed by its stamp, never before they were written, and the read lag covers them.
    writes = [W(20 + 10 * i, sse(T(f" s{i}"))) for i in range(10)]
    writes += [W(111 + i, sse(T(f" f{i}"))) for i in range(40)]
    record, written_s, held = _held_polls(writes, 200)
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 50
    assert sorted(held[-20:])[10] < PACE_NS + 400_000, held[-20:]  # the fast part's holds: PACE_NS
    for i, (arrived_s, sent_s) in enumerate(zip(record.token_times_s, written_s, strict=True)):
        assert arrived_s >= sent_s - 0.0005  # never early
        if i < 9 or i >= 16:  # the slow part, and the fast part after its first few: each on its own
            assert arrived_s == pytest.approx(sent_s, abs=0.001), i
        else:
            assert arrived_s - sent_s <= PACE_MAX_NS * 1e-9 + 0.001, i  # late by one hold at most
    assert max(record.read_lags_s) <= PACE_MAX_NS * 1e-9 + 0.001


def test_issue19_a_long_iteration_whose_steps_look_at_the_sockets_receives_each_token_on_its_own(gevent_ready):
    # Two tokens 10 ms apart arrive while the loop runs one long iteration (60 ms of steps of 2 ms,
    # as a spawn's users building and sending requests): no poll comes, but each step ends at a
    # checkpoint that looks at the reply sockets (LoopTurns.observe), so each token is received on
    # its own, stamped when it arrived, before the next one could merge with it.
    turns = LoopTurns()
    reply = Reply([W(30, sse(T("a"))), W(40, sse(T(" b"))), W(150, sse(TF("length"), "[DONE]"))])
    with ScriptedServer(reply) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        response = transport.post("/v1/completions", b"{}", {})
        steps_until = time.monotonic() + 0.06
        while time.monotonic() < steps_until:  # one iteration: the loop does not poll
            _block_loop(0.002)
            turns.observe()
        reads: list[tuple[bytes, float]] = []
        while data := response.read_some():
            reads.append((data, time.perf_counter() - response.read_age_s))
        response.close()
        transport.close()
        log = server.send_log(0)
    turns.close()
    assert [data for data, _ in reads[:2]] == [sse(T("a")), sse(T(" b"))]  # not merged
    assert reads[0][1] == pytest.approx(log.writes_s[0], abs=0.001)  # each timed by its own stamp
    assert reads[1][1] == pytest.approx(log.writes_s[1], abs=0.001)


class _Behind(LoopTurns):
    """Loop turns of a process that cannot keep up: a user waits at the turn gate, and stays there."""

    def __init__(self) -> None:
        super().__init__()
        self.queued.append((lambda _value: None, 0))

    def yield_if_turn_over(self, budget_ns: int) -> None:
        """Never lets the gate's timer run: the queued user would leave it."""


@pytest.mark.parametrize("turns_class", [LoopTurns, _Behind])
def test_issue19_a_saturated_process_stops_receiving_for_a_user_four_receives_behind(gevent_ready, turns_class):
    # Eight tokens 5 ms apart while the user is away for 100 ms. A process that keeps up receives
    # each on its own. One that cannot (users wait at the turn gate) stops receiving for this user
    # after four: the other four wait in the kernel and come in one receive when the user is back,
    # timed by the newest stamp with a lag that covers how far the older ones may be off.
    turns = turns_class()
    writes = [W(20 + 5 * i, sse(T(f" t{i}"))) for i in range(8)]
    with ScriptedServer(Reply([*writes, W(200, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        response = transport.post("/v1/completions", b"{}", {})
        gevent.sleep(0.1)
        reads: list[tuple[bytes, float]] = []
        while len(reads) < 8 and (data := response.read_some()):
            reads.append((data, response.read_lag_s))
        response.close()
        transport.close()
        log = server.send_log(0)
    turns.close()
    tokens = b"".join(data for data, _ in reads)
    assert tokens.startswith(b"".join(sse(T(f" t{i}")) for i in range(8)))
    if turns_class is LoopTurns:
        assert [data for data, _ in reads[:8]] == [sse(T(f" t{i}")) for i in range(8)]
    else:
        assert [data for data, _ in reads[:4]] == [sse(T(f" t{i}")) for i in range(4)]
        merged, lag_s = reads[4]
        assert merged == b"".join(sse(T(f" t{i}")) for i in range(4, 8))
        assert lag_s >= log.writes_s[7] - log.writes_s[4] - 0.001


def _counting_hand_outs(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every body read ``GeventResponse.read_some`` hands to a user from now on (the list fills as they come)."""
    handed: list[bytes] = []
    read_some = GeventResponse.read_some

    def counted(self: GeventResponse) -> bytes:
        data = read_some(self)
        handed.append(data)
        return data

    monkeypatch.setattr(GeventResponse, "read_some", counted)
    return handed


def test_issue19_plain_token_events_are_accounted_in_the_loop_not_handed_to_the_user(run_scripted, monkeypatch):
    # Forty token events 2 ms apart. The reader times the first token and learns its template; each
    # later one is accounted in the loop as it is received (LoopTokens), so the user is handed only
    # the first token, the finish and the end of the body, not a receive per token; and every token
    # keeps the time it arrived.
    handed = _counting_hand_outs(monkeypatch)
    writes = [W(20 + 2 * i, sse(T(f" t{i}"))) for i in range(40)]
    reply = Reply([*writes, W(110, sse(TF("length"), "[DONE]"))])
    run = run_scripted(reply, build_completion_request(model="m", prompt="p", max_tokens=40))
    record = run.record
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 40
    assert len(handed) <= 6, [data[:40] for data in handed]  # without it: 41 and the end
    for i, arrived_s in enumerate(record.token_times_s):
        assert arrived_s == pytest.approx(run.sent(20 + 2 * i), abs=0.001)
    assert record.read_lags_s == [0.0] * len(record.read_lags_s)  # one event per receive, each its own stamp
    assert record.end_s == run.at(110)


def test_issue19_tokens_received_after_one_the_user_must_decode_wait_behind_it_in_order(run_scripted, monkeypatch):
    # Two tokens with an escaped quote (not plain) at 60 and 70 ms, and plain ones every 2 ms after
    # them. The first is left to the user at once (the first receive left after one accounted in the
    # loop); the second, left again, within the batch time: the plain ones that arrive before the user
    # has taken it are queued behind it, not accounted in the loop ahead of it. (10 ms apart, so that a
    # loaded machine does not merge them into one receive, which would wake the user at once for both.)
    handed = _counting_hand_outs(monkeypatch)
    # (the quoted tokens come well after the first: a user still busy with the first token when they
    # arrive, on a loaded machine, would take them at once, before the plain ones behind them; the
    # first two are 2 ms apart like the rest, so the loop holds its polls 0.5 ms, not 2 ms, and each
    # quoted token is received on its own)
    texts = [" a", " b", ' "q"', ' "r"', *[f" t{i}" for i in range(30)]]
    writes = [W(10, sse(T(texts[0]))), W(12, sse(T(texts[1]))), W(60, sse(T(texts[2]))), W(70, sse(T(texts[3])))]
    writes += [W(72 + 2 * i, sse(T(text))) for i, text in enumerate(texts[4:])]
    reply = Reply([*writes, W(150, sse(TF("length"), "[DONE]"))])
    request = build_completion_request(model="m", prompt="p", max_tokens=len(texts))
    with ScriptedServer(reply) as server:
        client, transport = _client(server)
        record = client.run(request)
        log = server.send_log(0)
    transport.close()
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(texts)
    decoded = b"".join(handed)  # receives the user was handed (a loaded machine may merge neighbours)
    assert sse(T(' "q"')) in decoded  # the user decoded them
    assert sse(T(' "r"')) in decoded
    assert sse(T(" t0")) in decoded  # and the plain token after them, queued behind them
    assert record.token_times_s == sorted(record.token_times_s)
    assert len(record.token_times_s) == len(log.writes_s) - 1
    for arrived_s, written_s in zip(record.token_times_s, log.writes_s, strict=False):
        assert arrived_s >= written_s - log.arrived_s - 0.001  # never before the server wrote it


def test_issue19_a_process_behind_leaves_plain_tokens_to_its_users_so_the_kernel_can_merge_them(
    gevent_ready, monkeypatch
):
    # The same forty tokens as above in a process whose users wait at the turn gate: the loop does not
    # account them itself (it would receive every segment for a user who is not there to need it), so
    # the user is handed them, queued, and the tokens are as exact as ever.
    handed = _counting_hand_outs(monkeypatch)
    turns = _Behind()
    writes = [W(20 + 2 * i, sse(T(f" t{i}"))) for i in range(40)]
    with ScriptedServer(Reply([*writes, W(110, sse(TF("length"), "[DONE]"))])) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        record = StreamingClient(transport, keep_text=True).run(
            build_completion_request(model="m", prompt="p", max_tokens=40)
        )
        transport.close()
    turns.close()
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(f" t{i}" for i in range(40))
    assert sum(data.count(b"data: ") for data in handed) >= 40  # every token went through the user


class _BusyAfterPost:
    """A transport whose process is busy elsewhere (the whole loop held) right after the headers came."""

    def __init__(self, inner: GeventHTTPTransport, busy_s: float) -> None:
        self.inner, self.busy_s = inner, busy_s

    def connect(self) -> None:
        self.inner.connect()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> object:
        response = self.inner.post(path, body, headers)
        _block_loop(self.busy_s)
        return response


def test_issue19_a_reply_that_arrived_in_time_counts_though_the_client_reads_it_after_the_total_timeout(
    gevent_ready,
):
    # The whole reply arrives at 50 ms; the client's process is busy until ~150 ms; the total timeout
    # is 0.1 s. Arrival times say the reply was complete in time: it is a success, timed by its stamps,
    # not a timeout judged by when the client came to read. (Found by a breaker run.)
    reply = Reply([W(50, sse(T("a"), T(" b"), TF("length"), "[DONE]"))])
    with ScriptedServer(reply) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST)
        client = StreamingClient(_BusyAfterPost(transport, 0.15), keep_text=True, total_timeout_s=0.1)  # type: ignore[arg-type]
        record = client.run(build_completion_request(model="m", prompt="p", max_tokens=4))
    transport.close()
    assert record.outcome is Outcome.OK, record.error
    assert record.output_text == "a b"
    assert record.ttft_s == pytest.approx(0.05, abs=0.02)


@pytest.mark.parametrize(
    "before", [sse(T(" p")), sse(T(' "q"')), sse(T(" x"), T(" y"))], ids=["plain", "escaped", "two-events"]
)
def test_issue19_a_total_timeout_while_tokens_stream_ends_the_request_when_it_passes(run_scripted, before):
    # Tokens every 10 ms, total timeout 0.1 s, and at 95 ms a plain token, or one receive the loop leaves
    # to the user (an escaped token, two events in one receive): the tokens past the timeout, queued
    # behind it or not, wake the user at once, who raises the timeout then, not a batch time (0.1 s)
    # later. (Found by two breaker runs: 0.2 s, then 0.197 s behind a queued receive.)
    writes = [W(10 + 10 * i, sse(T(f" t{i}"))) for i in range(8)]
    writes += [W(95, before)] + [W(105 + 10 * i, sse(T(f" u{i}"))) for i in range(30)]
    request = build_completion_request(model="m", prompt="p", max_tokens=64)
    run = run_scripted(Reply([*writes, W(600, sse(TF("length"), "[DONE]"))]), request, total_timeout_s=0.1)
    record = run.record
    assert record.outcome is Outcome.TIMEOUT
    assert record.end_s is not None
    assert 0.1 <= record.end_s < 0.14

"""Shared fixtures. Tests never reach the network: only loopback servers they start themselves."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from llmload.request.record import RequestRecord
from llmload.testing import ReceivedRequest, Reply, ScriptedServer, SendLog

if TYPE_CHECKING:  # gevent is imported by the fixtures that use it, not by every test session's start
    from llmload.net.transport import GeventHTTPTransport

# No hub access from any test, even if something tries to load a tokenizer by name.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Loopback only, whatever proxy this machine's environment names (llmload honours HTTP_PROXY & co.);
# the proxy tests set their own.
for _name in [n for n in os.environ if n.lower().endswith("_proxy")]:
    del os.environ[_name]

# Property tests judge what the code does, not how fast this machine draws examples: on a busy machine
# (a CPU hog beside the suite, or the suite's own locust processes) Hypothesis's too_slow health check and
# per-example deadline fail tests whose properties hold. A test's own @settings still adds to these.
settings.register_profile("llmload", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("llmload")

_SENTENCES = [
    "Hello world",
    "Hello there world",
    "the quick brown fox jumps over the lazy dog",
    "a world of tokens and words",
    "Hello again to the whole world",
] * 20


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A ``tokenizers.Tokenizer`` (BPE, whitespace pre-tokenizer) trained here from a few sentences."""
    return _train(bos=False)


@pytest.fixture(scope="session")
def tiny_bos_tokenizer():
    """Like ``tiny_tokenizer`` but its post-processor adds ``<s>`` (BOS), Llama-style."""
    return _train(bos=True)


def _train(*, bos: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<s>"], show_progress=False)
    tokenizer.train_from_iterator(_SENTENCES, trainer)
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
        )
    return tokenizer


@dataclass
class RecordingCounter:
    """A ``TokenCounter`` that counts whitespace-separated words and remembers every text it saw."""

    texts: list[str]

    def count(self, text: str) -> int:
        self.texts.append(text)
        return len(text.split())


@pytest.fixture
def recording_counter() -> RecordingCounter:
    return RecordingCounter([])


@pytest.fixture(scope="session")
def gevent_ready() -> None:
    """Start gevent's hub and resolver thread pool once (~25 ms), so no test's first request pays it."""
    import gevent.socket

    gevent.socket.getaddrinfo("127.0.0.1", 80, 0, gevent.socket.SOCK_STREAM)


TIME_TOLERANCE_S = 0.005  # loopback timings are compared within ±5 ms
_SERVER_LATE_LIMIT_S = 0.05  # a write sent later than this means an overloaded machine, not a client bug


def near(seconds: float):
    """``seconds`` within the loopback tolerance, for ``==`` comparisons."""
    return pytest.approx(seconds, abs=TIME_TOLERANCE_S)


@dataclass
class ScriptedRun:
    """What one request against a ``ScriptedServer`` produced, with the server's real send times."""

    record: RequestRecord
    requests: Sequence[ReceivedRequest]
    connections: int
    reply: Reply
    log: SendLog
    t0_s: float  # the client's send time (after connect) on the shared perf_counter clock

    def sent(self, at_ms: float) -> float:
        """When the write scheduled at ``at_ms`` was really sent, in seconds after the client's send."""
        index = [i for i, w in enumerate(self.reply.writes) if w.at_ms == at_ms]
        assert len(index) == 1, f"the script has {len(index)} writes at {at_ms} ms; give them distinct times"
        return self._checked(self.log.writes_s[index[0]], at_ms)

    def headers_sent(self) -> float:
        """When the headers were really sent, in seconds after the client's send."""
        assert self.log.headers_s is not None
        return self._checked(self.log.headers_s, self.reply.headers_at_ms)

    def at(self, at_ms: float):
        """The write at ``at_ms`` as seen by the client: its real send time within ±5 ms."""
        return near(self.sent(at_ms))

    def _checked(self, sent_s: float, at_ms: float) -> float:
        late_s = sent_s - self.log.arrived_s - at_ms / 1000
        assert late_s < _SERVER_LATE_LIMIT_S, f"server wrote {late_s * 1000:.1f} ms late (overloaded machine?)"
        return sent_s - self.t0_s


class SendClock:
    """``time.perf_counter`` that knows the client's send time (its t0), for comparing with a server's send log.

    ``StreamingClient.run`` reads its clock first before ``connect`` and starts
    the request's clock on the ready connection, ``connect_s`` later: the send
    time is the first reading plus ``record.connect_s``. (Taking the first
    reading for it shifts every expected time by the connect time, which can
    be several ms on a busy machine, and the client then looks early.)
    """

    def __init__(self) -> None:
        self.first_s: float | None = None

    def __call__(self) -> float:
        now = time.perf_counter()
        if self.first_s is None:
            self.first_s = now
        return now

    def send_s(self, record: RequestRecord) -> float:
        """The client's send time for ``record`` (the first request timed by this clock)."""
        assert self.first_s is not None, "the client never read its clock"
        return self.first_s + (record.connect_s or 0.0)


class _SlowConnect:
    """A transport whose ``connect`` waits ``delay_s`` (the loop free) before the real one: a slow connection set-up."""

    def __init__(self, inner: GeventHTTPTransport, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s

    def connect(self) -> None:
        import gevent

        gevent.sleep(self._delay_s)
        self._inner.connect()

    def post(self, path: str, body: bytes, headers: Mapping[str, str]):
        return self._inner.post(path, body, headers)

    def get(self, path: str):
        return self._inner.get(path)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def run_scripted(gevent_ready: None) -> Callable[..., ScriptedRun]:
    """Run one request through ScriptedServer → GeventHTTPTransport → StreamingClient."""
    from llmload.net.transport import GeventHTTPTransport
    from llmload.request.client import StreamingClient
    from llmload.request.payloads import build_chat_request
    from llmload.settings.config import Timeouts

    def run(
        reply: Reply,
        request=None,
        *,
        token_counter=None,
        timeouts: Timeouts | None = None,
        total_timeout_s: float = 60.0,
        connect_delay_s: float = 0.0,
    ) -> ScriptedRun:
        if request is None:
            request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16)
        clock = SendClock()
        with ScriptedServer(reply) as server:
            transport = GeventHTTPTransport(
                server.base_url, headers={}, timeouts=timeouts or Timeouts(connect_s=5, idle_s=10, total_s=60)
            )
            try:
                client = StreamingClient(
                    _SlowConnect(transport, connect_delay_s) if connect_delay_s else transport,
                    clock=clock,
                    token_counter=token_counter,
                    total_timeout_s=total_timeout_s,
                )
                gc.disable()  # a full collection late in a long session can pause for >5 ms
                record = client.run(request)
            finally:
                gc.enable()
                transport.close()
            return ScriptedRun(
                record, server.requests, server.connections_accepted, reply, server.send_log(0), clock.send_s(record)
            )

    return run


_EDGE = Path(__file__).resolve().parent / "edge"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``tests/edge`` imports Locust (a monkey-patch of the standard library): collected only when asked for by path.

    ``pytest tests/edge`` runs them in a process of their own; ``pytest`` or ``pytest tests`` skips them.
    """
    if collection_path != _EDGE:
        return None
    asked = [Path(str(arg).split("::")[0]).resolve() for arg in config.args]
    return not any(path == _EDGE or _EDGE in path.parents for path in asked)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run only every N-th collected test starting at the K-th (0-based), so N pytest processes share "
        "a pass that cannot use pytest-xdist (tests/edge: gevent's patch breaks xdist's worker threads)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--shard K/N``: keep items K, K+N, K+2N, ... of the collected order (round robin, so slow files spread)."""
    shard = config.getoption("--shard")
    if shard is None:
        return
    try:
        k, n = (int(part) for part in shard.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {shard!r}: expected K/N with 0 <= K < N, e.g. --shard 0/2") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"--shard {shard!r}: expected K/N with 0 <= K < N, e.g. --shard 0/2")
    kept = items[k::n]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k])
    items[:] = kept


def _sim_servers() -> Iterator[Callable[..., str]]:
    from tests.simserver import SimThread

    started: list[SimThread] = []

    def start(*args: str) -> str:
        started.append(SimThread(*args))
        return started[-1].url

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def sim_server() -> Iterator[Callable[..., str]]:
    """Factory: ``sim_server(*args) -> base URL`` of ``llmload sim ARGS`` served in this process (a thread).

    Every simulator started is stopped at teardown. Tests of the simulator's process itself (exit
    status, stderr, signals) use ``tests.integration.test_sim.start_sim``.
    """
    yield from _sim_servers()


@pytest.fixture(scope="module")
def module_sim_server() -> Iterator[Callable[..., str]]:
    """``sim_server`` for module-scoped fixtures: the simulators are stopped after the module's tests."""
    yield from _sim_servers()

"""A Locust master and its workers in one process, talking over queues instead of ZeroMQ sockets.

The edge tests drive llmload's master/worker protocol (``llmload.edge.cluster``,
``live``, ``checkpoints``, ``launch``, ``hooks``) with Locust's own runners: the
real ``MasterRunner.handle_message`` / ``WorkerRunner.handle_message`` dispatch,
``start``/``stop``/``quit``, the users' greenlets. Only the transport is replaced:
``Link`` is one ordered connection per worker, and every message makes the msgpack
round trip Locust's RPC makes (a payload that is not msgpack-safe fails here as it
would on the wire). The runner subclasses build what Locust's constructors build,
minus the socket and the heartbeat greenlets (a test loses a worker by calling
``EdgeCluster.lose``, which is what Locust's heartbeat check does after 4 s of silence).

Each node has its own ``Environment`` and ``Events``, so listeners never cross nodes.
"""

from __future__ import annotations

from locust import argument_parser
from locust.env import Environment
from locust.event import Events
from locust.exception import RPCError
from locust.html import get_html_report, process_html_filename
from locust.rpc import Message
from locust.runners import (
    STATE_INIT,
    STATE_MISSING,
    DistributedRunner,
    MasterRunner,
    WorkerNodes,
    WorkerRunner,
)
from locust.stats import (
    PERCENTILES_TO_REPORT,
    StatsCSVFileWriter,
    print_error_report,
    print_percentile_stats,
    print_stats,
)
from locust.util.timespan import parse_timespan

import contextlib
import functools
import gc
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
import gevent.queue

from llmload.edge import hooks
from llmload.edge.api_users import EmbeddingsUser, MessagesUser, ResponsesUser
from llmload.edge.runtime import Runtime, runtime_of
from llmload.edge.users import ChatUser, CompletionUser

__all__ = [
    "EdgeCluster",
    "EdgeMaster",
    "EdgeWorker",
    "Link",
    "parse_options",
    "run_cluster",
    "run_local",
    "run_locust_here",
    "run_locustfile_here",
]

log = logging.getLogger(__name__)


def parse_options(args: Sequence[str]) -> Any:
    """Locust's parsed options with llmload's added, as ``locust ARGS`` would parse them (no environment vars)."""
    parser = argument_parser.get_empty_argument_parser()
    argument_parser.setup_parser_arguments(parser)
    hooks.add_arguments(parser)
    return parser.parse_args(["-f", "locustfile.py", *args])


class Link:
    """The master's side and each worker's side of their connections: ordered queues, msgpack on the way."""

    def __init__(self) -> None:
        self.to_master: gevent.queue.Queue[tuple[str, bytes]] = gevent.queue.Queue()
        self.to_worker: dict[str, gevent.queue.Queue[bytes]] = {}
        self.cut: set[str] = set()  # workers whose connection is gone (lost)
        self.sent: list[Message] = []  # every message, in order, as the receiver decoded it
        self.wire: list[bytes] = []  # every message, in order, as the sender serialized it

    def send_to_master(self, msg: Message) -> None:
        if msg.node_id in self.cut:
            raise RPCError("connection to the master is gone")
        raw = msg.serialize()
        self.wire.append(raw)
        self.to_master.put((msg.node_id, raw))

    def send_to_worker(self, msg: Message) -> None:
        if msg.node_id in self.cut:
            return  # a message to a lost worker goes nowhere, as on a dead socket
        raw = msg.serialize()
        self.wire.append(raw)
        self.to_worker[msg.node_id].put(raw)

    def recv_on_master(self) -> tuple[str, Message]:
        node_id, raw = self.to_master.get()
        msg = Message.unserialize(raw)
        self.sent.append(msg)
        return node_id, msg

    def recv_on_worker(self, client_id: str) -> Message:
        msg = Message.unserialize(self.to_worker[client_id].get())
        self.sent.append(msg)
        return msg


class _Server:
    """What ``MasterRunner`` uses of ``locust.rpc.rpc.Server``."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def send_to_client(self, msg: Message) -> None:
        self._link.send_to_worker(msg)

    def recv_from_client(self) -> tuple[str, Message]:
        return self._link.recv_on_master()

    def close(self, linger: int | None = None) -> None:
        del linger


class _Client:
    """What ``WorkerRunner`` uses of ``locust.rpc.rpc.Client``."""

    def __init__(self, link: Link, client_id: str) -> None:
        self._link, self._id = link, client_id
        link.to_worker[client_id] = gevent.queue.Queue()

    def send(self, msg: Message) -> None:
        self._link.send_to_master(msg)

    def recv(self) -> Message:
        return self._link.recv_on_worker(self._id)

    def close(self, linger: int | None = None) -> None:
        del linger


class EdgeMaster(MasterRunner):
    """``MasterRunner`` over a ``Link``: Locust's constructor without the socket and the heartbeat check."""

    def __init__(self, environment: Environment, link: Link) -> None:
        DistributedRunner.__init__(self, environment)
        self.worker_cpu_warning_emitted = False
        self.master_bind_host, self.master_bind_port = "127.0.0.1", 0
        self.spawn_rate = 0.0
        self.spawning_completed = False
        self.worker_indexes = {}
        self.worker_index_max = 0
        self.clients = WorkerNodes()
        self.server = _Server(link)  # type: ignore[assignment]
        self._users_dispatcher = None
        self.greenlet.spawn(self.client_listener)

        def on_worker_report(client_id: str, data: dict[str, Any]) -> None:  # as Locust's
            if client_id in self.clients:
                self.clients[client_id].user_classes_count = data["user_classes_count"]

        environment.events.worker_report.add_listener(on_worker_report)
        environment.events.quitting.add_listener(lambda environment, **_kw: self.quit())


class EdgeWorker(WorkerRunner):
    """``WorkerRunner`` over a ``Link``: Locust's constructor without the socket, heartbeats and timed reports.

    A test sends a report with ``send_report()`` (Locust's ``stats_reporter`` does it every 3 s).
    """

    def __init__(self, environment: Environment, link: Link, client_id: str) -> None:
        DistributedRunner.__init__(self, environment)
        self.retry = 0
        self.connected = False
        self.last_heartbeat_timestamp = None
        self.connection_event = gevent.event.Event()
        self.worker_state = STATE_INIT
        self.client_id = client_id
        self.master_host, self.master_port = "127.0.0.1", 0
        self.web_base_path = ""
        self.logs = []
        self.worker_cpu_warning_emitted = False
        self._users_dispatcher = None
        self.client = _Client(link, client_id)  # type: ignore[assignment]
        self.greenlet.spawn(self.worker)

        def on_report_to_master(client_id: str, data: dict[str, Any]) -> None:  # as Locust's
            data["user_classes_count"] = self.user_classes_count
            data["user_count"] = self.user_count

        environment.events.report_to_master.add_listener(on_report_to_master)
        environment.events.quitting.add_listener(
            lambda environment, **_kw: self.client.send(Message("quit", None, self.client_id))
        )

    def send_report(self) -> None:
        """One regular report (Locust's and llmload's parts), as the 3 s reporter sends it."""
        self._send_stats()


@dataclass
class EdgeCluster:
    """A master and ``workers`` workers over one ``Link``; llmload's hooks installed on each node."""

    master_env: Environment
    worker_envs: list[Environment]
    link: Link
    _greenlets: list[gevent.Greenlet] = field(default_factory=list)

    @property
    def master(self) -> EdgeMaster:
        runner = self.master_env.runner
        assert isinstance(runner, EdgeMaster)
        return runner

    @property
    def workers(self) -> list[EdgeWorker]:
        runners = [env.runner for env in self.worker_envs]
        assert all(isinstance(r, EdgeWorker) for r in runners)
        return runners  # type: ignore[return-value]

    @property
    def runtime(self) -> Runtime:
        """The master's llmload state."""
        return _installed(self.master_env)

    def worker_runtime(self, index: int) -> Runtime:
        return _installed(self.worker_envs[index])

    def messages(self, msg_type: str) -> list[Message]:
        """Every message of ``msg_type`` delivered so far, in order."""
        return [m for m in self.link.sent if m.type == msg_type]

    def wire_bytes(self, msg_type: str) -> list[bytes]:
        """Every message of ``msg_type`` sent so far, as the bytes its sender put on the connection, in order."""
        return [raw for raw in self.link.wire if Message.unserialize(raw).type == msg_type]

    def start(self, users: int, spawn_rate: float | None = None, *, timeout_s: float = 30) -> None:
        """Press START: the master plans and sends the spawn messages; wait until every worker runs its users."""
        self.master.start(users, spawn_rate or users)
        wait_until(lambda: self.master.user_count == users and self.master.spawning_completed, timeout_s, "spawned")

    def report(self) -> None:
        """Each live worker sends one regular report; wait until the master has read them."""
        for worker in self.workers:
            if worker.client_id not in self.link.cut:
                worker.send_report()
        self.settle()

    def settle(self, timeout_s: float = 10) -> None:
        """Wait until every queued message was read by its receiver."""
        wait_until(
            lambda: self.link.to_master.empty() and all(q.empty() for q in self.link.to_worker.values()),
            timeout_s,
            "the messages delivered",
        )
        gevent.sleep(0.01)  # the receivers' handlers run

    def shutdown(self, timeout_s: float = 30) -> int:
        """The master process's end, as Locust's main does it: ``quitting`` (listeners reversed), then ``quit``.

        Returns the exit status the process would have (llmload's, else 0); the summary is printed here.
        """
        env = self.master_env
        gevent.spawn(env.events.quitting.fire, environment=env, reverse=True).get(timeout=timeout_s)
        code = env.process_exit_code if env.process_exit_code is not None else 0
        gevent.spawn(env.events.quit.fire, exit_code=code).get(timeout=timeout_s)
        return code

    def lose(self, index: int) -> str:
        """Worker ``index`` vanishes (killed): its greenlets end, its connection is cut, the master marks it missing."""
        worker = self.workers[index]
        self.link.cut.add(worker.client_id)
        worker.greenlet.kill(block=True)
        worker.user_greenlets.kill(block=True)
        node = self.master.clients[worker.client_id]
        node.state = STATE_MISSING  # what Locust's heartbeat check does after 4 missed heartbeats
        node.user_classes_count = {}
        return worker.client_id

    def close(self) -> None:
        for env in [*self.worker_envs, self.master_env]:
            runner = env.runner
            if runner is not None:
                runner.user_greenlets.kill(block=True)
                runner.greenlet.kill(block=True)
        for greenlet in self._greenlets:
            greenlet.kill(block=True)


def wait_until(ready: Any, timeout_s: float, what: str) -> None:
    """Yield to the event loop until ``ready()``; fail the test after ``timeout_s``."""
    with gevent.Timeout(timeout_s, AssertionError(f"not {what} within {timeout_s:g} s")):
        while not ready():
            gevent.sleep(0.01)


def _node(user_classes: list[type], host: str, args: Sequence[str], *, forked: bool = False) -> Environment:
    options = parse_options(args)
    if forked:  # what Locust's --processes does to a forked child's options (locust/main.py)
        options.master, options.worker = False, True
        options.run_time = options.autostart = options.csv_prefix = options.html_file = options.print_stats = None
        options.stats_history_enabled = False
    env = Environment(user_classes=user_classes, events=Events(), parsed_options=options, host=host)
    env.stop_timeout = float(env.parsed_options.stop_timeout or 0)  # type: ignore[union-attr]
    hooks.install(env.events)
    return env


def _own_classes(user_class: type | Sequence[type]) -> list[type]:
    """A subclass of each user class, of this run's own (Locust sets ``host`` on the user class at each start)."""
    classes = [user_class] if isinstance(user_class, type) else list(user_class)
    return [type(c.__name__, (c,), {"__module__": c.__module__}) for c in classes]


def _spawn_rate(options: Any, args: Sequence[str], users: int) -> float:
    """``-r`` when the command line gives it, else all ``users`` within a second."""
    given = any(a in ("-r", "--spawn-rate") or a.startswith("--spawn-rate=") for a in args)
    return float(options.spawn_rate) if given else float(users)


def _fire_init(env: Environment) -> None:
    # Outside the main greenlet, llmload's init leaves SIGINT alone (it installs its interrupter only there).
    gevent.spawn(env.events.init.fire, environment=env, runner=env.runner, web_ui=None).get(timeout=60)


@contextlib.contextmanager
def edge_cluster(
    user_class: type, host: str, master_args: Sequence[str], *, workers: int = 2, worker_args: Sequence[str] = ()
) -> Iterator[EdgeCluster]:
    """A master with ``master_args`` (``--master`` implied) and ``workers`` connected workers, closed at exit.

    The nodes run a subclass of ``user_class`` of its own (Locust sets ``host`` on the user class at each
    start), and every greenlet started meanwhile (llmload's reporters, watchers) is killed at exit.
    """
    before = _greenlets()
    user_class = type(user_class.__name__, (user_class,), {"__module__": user_class.__module__})
    link = Link()
    port = [] if "--prometheus-port" in master_args else ["--prometheus-port", "0"]  # no exporter unless asked
    master_env = _node([user_class], host, ["--master", *port, *master_args])
    master_env._create_runner(EdgeMaster, link)  # type: ignore[arg-type]
    _fire_init(master_env)
    worker_envs = []
    for index in range(workers):
        env = _node([user_class], "", ["--worker", *worker_args])
        env._create_runner(EdgeWorker, link, f"worker-{index}")  # type: ignore[arg-type]
        _fire_init(env)
        worker_envs.append(env)
    cluster = EdgeCluster(master_env, worker_envs, link)
    try:
        for worker in cluster.workers:
            gevent.spawn(worker.connect_to_master).get(timeout=30)
        wait_until(lambda: len(cluster.master.clients.ready) == workers, 30, f"{workers} workers connected")
        yield cluster
    finally:
        cluster.close()
        gevent.killall([g for g in _greenlets() - before if not g.dead], block=True, timeout=10)


def _greenlets() -> set[gevent.Greenlet]:
    """This thread's greenlets running llmload's or Locust's code (reporters, watchers, users).

    Another thread's (the simulator's) and the test's own servers (threads, which are greenlets
    here) are left alone.
    """
    hub = gevent.get_hub()
    return {
        o
        for o in gc.get_objects()
        if isinstance(o, gevent.Greenlet) and o.parent is hub and _module_of(o).startswith(("llmload", "locust"))
    }


def _module_of(greenlet: gevent.Greenlet) -> str:
    run = getattr(greenlet, "_run", None)
    while isinstance(run, functools.partial):
        run = run.func
    return str(getattr(run, "__module__", "") or "")


@dataclass
class LocalRun:
    """What a single-process run left: its results (None if none were built) and its exit status."""

    results: dict[str, Any] | None
    exit_status: int


def run_local(
    user_class: type | Sequence[type], host: str, args: Sequence[str], *, users: int, timeout_s: float = 60
) -> LocalRun:
    """A single-process run (``locust ARGS`` with Locust's ``LocalRunner``) of ``users`` users, to its end.

    ``args`` are the command line (``--headless`` for the results line and the quit at the limit);
    the run ends by itself (``--num-requests``, ``-t``, a blocked start) or after ``timeout_s`` (the test fails).
    ``-r`` is honoured when given (else every user starts within a second). Several user classes share
    the users by weight, as in a locustfile with several. Console output goes to this process's stdout
    and stderr (``capsys``).
    """
    before = _greenlets()
    port = [] if "--prometheus-port" in args else ["--prometheus-port", "0"]
    env = _node(_own_classes(user_class), host, [*port, *args])
    runner = env.create_local_runner()
    try:
        try:
            _fire_init(env)
        except SystemExit as exc:  # refused before load: llmload's init ends the process
            runtime = runtime_of(env)
            return LocalRun(None if runtime is None else runtime.run.results, int(exc.code or 0))
        csv_writer = _start_csv(env)
        gevent.spawn(runner.start, users, _spawn_rate(env.parsed_options, args, users)).get(timeout=timeout_s)
        run_time = getattr(env.parsed_options, "run_time", None)
        if run_time:  # -t: Locust's main quits a headless run when the time is up
            gevent.spawn_later(parse_timespan(str(run_time)), runner.quit)
        runtime = _installed(env)
        wait_until(lambda: runtime.run.results is not None, timeout_s, "the run finished")
        wait_until(lambda: runner.state == "stopped", timeout_s, "the runner stopped")
        _save_html(env)
        code = _shutdown(env, timeout_s)
        if csv_writer is not None:
            csv_writer.close_files()
        return LocalRun(runtime.run.results, code)
    finally:
        runner.user_greenlets.kill(block=True)
        runner.greenlet.kill(block=True)
        gevent.killall([g for g in _greenlets() - before if not g.dead], block=True, timeout=10)


def run_cluster(
    user_class: type | Sequence[type],
    host: str,
    args: Sequence[str],
    *,
    workers: int,
    users: int,
    timeout_s: float = 60,
) -> LocalRun:
    """``locust ARGS`` (with ``--processes WORKERS``) here: a master and ``workers`` forked workers over a ``Link``.

    As Locust's ``--processes``: the master expects ``workers`` workers, each worker has the master's
    command line (``worker`` set, ``-t`` and the outputs cleared, as Locust does in a forked child); a
    headless master starts the ``users`` once all are connected and quits when ``-t`` is up; each
    process ends with Locust's shutdown (``quitting``, Locust's tables on the master, ``quit``).
    Returns the master's results and exit status (a start refused at the master's ``init``: its status).
    """
    before = _greenlets()
    classes = _own_classes(user_class)
    link = Link()
    port = [] if "--prometheus-port" in args else ["--prometheus-port", "0"]
    # No master port of this machine's: the master binds none here (a port given by the test is kept)
    ports = (
        [] if {"--master-port", "--master-bind-port"} & set(args) else ["--master-bind-port", "0", "--master-port", "0"]
    )
    master_env = _node(classes, host, ["--master", "--expect-workers", str(workers), *ports, *port, *args])
    master_env._create_runner(EdgeMaster, link)  # type: ignore[arg-type]
    cluster = EdgeCluster(master_env, [], link)
    try:
        try:
            _fire_init(master_env)
        except SystemExit as exc:  # refused before load: llmload's init ends the master (and its children)
            runtime = runtime_of(master_env)
            return LocalRun(None if runtime is None else runtime.run.results, int(exc.code or 0))
        for index in range(workers):
            env = _node(classes, host, [*port, *args], forked=True)
            env._create_runner(EdgeWorker, link, f"worker-{index}")  # type: ignore[arg-type]
            _fire_init(env)
            cluster.worker_envs.append(env)
        for worker in cluster.workers:
            gevent.spawn(worker.connect_to_master).get(timeout=30)
        wait_until(lambda: len(cluster.master.clients.ready) == workers, 30, f"{workers} workers connected")
        master = cluster.master
        csv_writer = _start_csv(master_env)
        gevent.spawn(master.start, users, _spawn_rate(master_env.parsed_options, args, users)).get(timeout=timeout_s)
        run_time = getattr(master_env.parsed_options, "run_time", None)
        if run_time:  # -t: Locust's main quits a headless run when the time is up
            gevent.spawn_later(parse_timespan(str(run_time)), master.quit)
        runtime = _installed(master_env)
        wait_until(lambda: runtime.run.results is not None, timeout_s, "the run finished")
        wait_until(lambda: not master.greenlet, timeout_s, "the master quit")  # its main's join returns
        _save_html(master_env)
        code = _shutdown(master_env, timeout_s)
        if csv_writer is not None:
            csv_writer.close_files()
        for worker, env in zip(cluster.workers, cluster.worker_envs, strict=True):
            wait_until(lambda w=worker: not w.greenlet, timeout_s, f"{worker.client_id} quit")  # the master's quit
            _shutdown(env, timeout_s)
        return LocalRun(runtime.run.results, code)
    finally:
        for env in cluster.worker_envs:  # what the workers' process exit closes
            worker_runtime = runtime_of(env)
            if worker_runtime is not None and worker_runtime.process.requests_log is not None:
                worker_runtime.process.requests_log.close()
        cluster.close()
        gevent.killall([g for g in _greenlets() - before if not g.dead], block=True, timeout=10)


def _installed(env: Environment) -> Runtime:
    """The llmload state of a node whose ``init`` ran (``llmload.edge.runtime.runtime_of``)."""
    runtime = runtime_of(env)
    assert runtime is not None, "llmload's init did not run on this node"
    return runtime


def _start_csv(env: Environment) -> StatsCSVFileWriter | None:
    """``--csv PREFIX``: Locust's CSV writer, started as its main starts it (a worker writes none)."""
    options = env.parsed_options
    prefix = getattr(options, "csv_prefix", None)
    if not prefix or isinstance(env.runner, WorkerRunner):
        return None
    if base := os.path.dirname(prefix):
        os.makedirs(base, exist_ok=True)
    writer = StatsCSVFileWriter(env, PERCENTILES_TO_REPORT, prefix, bool(options.stats_history_enabled))
    gevent.spawn(writer.stats_writer)
    return writer


def _save_html(env: Environment) -> None:
    """``--html FILE``: Locust's HTML report, written as its main writes it once the runner is done."""
    options = env.parsed_options
    if not getattr(options, "html_file", None) or isinstance(env.runner, WorkerRunner):
        return
    report = get_html_report(env, show_download_link=False)
    process_html_filename(options)
    if html_dir := os.path.dirname(options.html_file):
        os.makedirs(html_dir, exist_ok=True)
    with open(options.html_file, "w", encoding="utf-8") as file:
        file.write(report)


def _shutdown(env: Environment, timeout_s: float) -> int:
    """Locust's main at a process's end: ``quitting`` (listeners reversed), the exit code, the tables, ``quit``."""
    gevent.spawn(env.events.quitting.fire, environment=env, reverse=True).get(timeout=timeout_s)
    code = env.process_exit_code if env.process_exit_code is not None else 0
    runner = env.runner
    if runner is not None and not isinstance(runner, WorkerRunner):
        print_stats(runner.stats, current=False)
        print_percentile_stats(runner.stats)
        print_error_report(runner.stats)
    gevent.spawn(env.events.quit.fire, exit_code=code).get(timeout=timeout_s)
    return code


@dataclass
class CompletedRun:
    """A single-process run as ``subprocess.run`` would report ``locust ARGS``: exit status and both streams."""

    returncode: int
    stdout: str
    stderr: str
    results: dict[str, Any] | None


def run_locust_here(
    user_class: type | Sequence[type],
    args: Sequence[str],
    *,
    users: int,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> CompletedRun:
    """``locust ARGS`` (with ``-H URL``; ``-u N`` overrides ``users``) run to its end here, its output captured.

    ``--processes N`` runs a master and N workers (``run_cluster``), else one process (``run_local``).
    ``env`` is set in ``os.environ`` for the run (restored after). llmload's log lines go to the
    captured stderr as Locust's would (``LEVEL/logger: message``); stdout is not a terminal, so a
    headless run ends with its results line, as in a pipe.
    """
    given = list(args)
    host = _last_value(given, "-H") or ""
    users = int(_last_value(given, "-u") or users)
    processes = _last_value(given, "--processes")
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(levelname)s/%(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(getattr(logging, (_last_value(given, "--loglevel") or "INFO").upper()))  # Locust's --loglevel
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if processes is None:
                run = run_local(user_class, host, given, users=users, timeout_s=timeout_s)
            else:
                run = run_cluster(user_class, host, given, workers=int(processes), users=users, timeout_s=timeout_s)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return CompletedRun(run.exit_status, out.getvalue(), err.getvalue(), run.results)


# The packaged locustfiles' user classes (``locustfiles/NAME.py``: its user classes and ``hooks.install()``).
LOCUSTFILES: dict[str, type | tuple[type, ...]] = {
    "chat": ChatUser,
    "completions": CompletionUser,
    "responses": ResponsesUser,
    "messages": MessagesUser,
    "embeddings": EmbeddingsUser,
}


def _mixed() -> tuple[type, ...]:
    from llmload.locustfiles import mixed  # its classes (weights 3:1:1), imported when a test runs it

    return (mixed.Chat, mixed.Responses, mixed.Embeddings)


def run_locustfile_here(
    args: Sequence[str], *, timeout_s: float = 60, env: dict[str, str] | None = None
) -> CompletedRun:
    """``locust -f locustfiles/NAME.py ARGS`` run here: ``run_locust_here`` with that locustfile's user class."""
    assert args[0] == "-f", "the command line starts with -f locustfiles/NAME.py"
    name = os.path.basename(args[1]).removesuffix(".py")
    user_classes = _mixed() if name == "mixed" else LOCUSTFILES[name]
    return run_locust_here(user_classes, args[2:], users=1, env=env, timeout_s=timeout_s)


def _last_value(args: list[str], flag: str) -> str | None:
    """The value after the last ``flag`` in ``args`` (as argparse keeps the last), or None."""
    if flag not in args:
        return None
    return args[len(args) - 1 - args[::-1].index(flag) + 1]

"""The check between Locust's parse and its fork: a master port already taken, read off the parsed options.

Locust's own parser with llmload's options (``tests/edge/cluster.parse_options``): what Locust's
``main`` would do next (fork, bind) is read from the options the parse returned.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from llmload.edge.refusals import launch_refusal
from tests.edge.cluster import parse_options


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 another process listens on (held as a listening socket)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_processes_on_a_taken_master_port_forks_nothing_binds_nothing_and_leaves_the_refusal(taken_port) -> None:
    options = parse_options(["--processes", "2", "--master-bind-host", "127.0.0.1", "--master-port", str(taken_port)])
    refusal = launch_refusal(options)
    assert refusal is not None
    assert refusal.message.startswith(f"--processes 2: the master port 127.0.0.1:{taken_port} is already in use")
    assert refusal.message.endswith("or stop the other run")
    assert "pass --master-port " in refusal.message
    assert refusal.given == {"--processes": "2", "--master-port": str(taken_port)}
    assert options.processes is None  # Locust's main forks no worker
    assert options.master is False  # and binds no master port: llmload's init refuses the run


def test_master_on_a_taken_port_names_master_bind_port_as_the_fix(taken_port) -> None:
    options = parse_options(["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(taken_port)])
    refusal = launch_refusal(options)
    assert refusal is not None
    assert refusal.message.startswith(f"--master: the master port 127.0.0.1:{taken_port} is already in use")
    assert "pass --master-bind-port " in refusal.message
    assert refusal.given == {"--master-bind-port": str(taken_port)}


def test_processes_with_a_free_master_port_alone_binds_the_master_there() -> None:
    port = _free_port()
    options = parse_options(["--processes", "2", "--master-bind-host", "127.0.0.1", "--master-port", str(port)])
    assert launch_refusal(options) is None
    assert (options.processes, options.master_bind_port, options.master_port) == (2, port, port)


def test_one_process_run_is_not_checked(taken_port) -> None:
    options = parse_options(["--master-port", str(taken_port)])
    assert launch_refusal(options) is None
    assert options.master_bind_port == 5557  # left as parsed

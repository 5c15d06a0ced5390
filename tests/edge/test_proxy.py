"""Forward proxies from the environment (NC-06): through the proxy unless NO_PROXY matches.

An origin server and a small forward proxy (``forward_proxy.ForwardProxy``, which logs
absolute-form targets and CONNECTs) on loopback; every locust command line runs in this process
(``tests/edge/cluster.run_locust_here``), its proxy variables set for the run, bounded by
``--num-requests``, ``-t`` and a timeout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmload.edge.users import ChatUser
from llmload.testing import Framing, ReceivedRequest, Reply, ScriptedServer, W, json_reply
from tests.edge.cluster import CompletedRun, run_locust_here
from tests.integration.forward_proxy import ForwardProxy
from tests.integration.procs import free_port
from tests.integration.test_proxy import MODELS, PASSWORD, PROXY_407, SECRETS, STREAM, TOKEN, USER
from tests.integration.test_tls import tls_server  # noqa: F401 - the https origin fixture

METRICS = 'vllm:prompt_tokens_total{model_name="m"} 30\nvllm:generation_tokens_total{model_name="m"} 12\n'


def _reply(request: ReceivedRequest) -> Reply:
    return json_reply(200, MODELS) if request.method == "GET" else STREAM


def _reply_with_metrics(request: ReceivedRequest) -> Reply:
    if request.path == "/metrics":
        return Reply(writes=[W(0, METRICS)], headers={"Content-Type": "text/plain"}, framing=Framing.CONTENT_LENGTH)
    return _reply(request)


def _run(args: list[str], proxy_env: dict[str, str], timeout_s: float = 120) -> CompletedRun:
    """Run locust here with exactly ``proxy_env`` as its proxy variables (the test machine's own are removed)."""
    assert args[:2] == ["-f", "locustfiles/chat.py"]
    assert not [k for k in os.environ if k.lower().endswith("_proxy")]  # tests/conftest.py removed them
    return run_locust_here(ChatUser, args[2:], users=1, env=proxy_env, timeout_s=timeout_s)


def _outputs(proc: CompletedRun, *files: Path) -> str:
    return proc.stdout + proc.stderr + "".join(f.read_text() for f in files if f.exists())


def _load_args(host: str, tmp_path: Path, *more: str, server_metrics: str = "off") -> list[str]:
    """A bounded 6-request run; ``--server-metrics off`` unless asked, so the origin sees only the load's requests."""
    return [
        "-f", "locustfiles/chat.py", "--headless", "-H", host, "-u", "2", "-r", "2",
        "--num-requests", "6", "-t", "60s", "--results-json", str(tmp_path / "r.json"),
        "--requests-log", str(tmp_path / "requests.jsonl"), "--server-metrics", server_metrics, *more,
    ]  # fmt: skip


def test_nc06_http_proxy_carries_preflight_and_load_in_absolute_form(tmp_path):
    with ScriptedServer(_reply) as origin, ForwardProxy(require=TOKEN) as proxy:
        proc = _run(
            _load_args(origin.base_url, tmp_path),
            {"HTTP_PROXY": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}"},
        )
        seen, received, base_url, proxy_port = proxy.log, origin.requests, origin.base_url, proxy.port
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["requests"]["succeeded"] == 6
    # every request the origin answered came through the proxy, in absolute form, with the proxy's credentials
    assert [(r.method, r.target) for r in seen] == [(r.method, f"{base_url}{r.path}") for r in received]
    assert [r.method for r in seen] == ["GET"] + ["POST"] * 7  # model list, probe, 6 requests
    assert {r.proxy_authorization for r in seen} == {TOKEN}
    assert all("proxy-authorization" not in r.headers for r in received)  # not forwarded to the origin
    assert f"go through the proxy http://127.0.0.1:{proxy_port} (from HTTP_PROXY" in proc.stderr
    shown = _outputs(proc, tmp_path / "r.json", tmp_path / "requests.jsonl")
    assert not [s for s in SECRETS if s in shown]


@pytest.mark.parametrize(
    ("extra_env", "extra_args", "note"),
    [
        ({"NO_PROXY": "127.0.0.1"}, [], "HTTP_PROXY is set but NO_PROXY matches"),
        ({"no_proxy": "localhost, 127.0.0.1"}, [], "HTTP_PROXY is set but NO_PROXY matches"),
        ({}, ["--ignore-proxy-env"], "--ignore-proxy-env: HTTP_PROXY ignored"),
    ],
    ids=["NO_PROXY", "no_proxy-list", "ignore-proxy-env"],
)
def test_nc06_no_proxy_or_ignore_proxy_env_connects_directly(tmp_path, extra_env, extra_args, note):
    with ScriptedServer(_reply) as origin, ForwardProxy() as proxy:
        proc = _run(
            _load_args(origin.base_url, tmp_path, *extra_args),
            {"HTTP_PROXY": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}", **extra_env},
        )
        seen, received = proxy.log, origin.requests
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen == []
    assert [r.method for r in received] == ["GET"] + ["POST"] * 7
    assert note in proc.stderr
    assert not [s for s in SECRETS if s in _outputs(proc, tmp_path / "r.json")]


def test_nc06_https_target_goes_through_a_connect_tunnel(tmp_path, tls_server):  # noqa: F811
    port = tls_server.rsplit(":", 1)[1]
    args = [
        "-f", "locustfiles/chat.py", "--headless", "-H", tls_server, "--insecure", "-u", "1", "-r", "1",
        "--num-requests", "3", "-t", "60s", "--results-json", str(tmp_path / "r.json"), "--server-metrics", "off",
    ]  # fmt: skip
    with ForwardProxy(require=TOKEN) as proxy:
        # HTTP_PROXY points nowhere: an https target must use HTTPS_PROXY
        env = {"HTTPS_PROXY": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}", "HTTP_PROXY": "http://127.0.0.1:9"}
        proc = _run(args, env)
        seen, proxy_port = proxy.log, proxy.port
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())["requests"]["succeeded"] == 3
    # the TLS origin closes every connection: model list, probe and 3 requests = 5 tunnels
    assert [(r.method, r.target, r.proxy_authorization) for r in seen] == [("CONNECT", f"127.0.0.1:{port}", TOKEN)] * 5
    assert f"through the proxy http://127.0.0.1:{proxy_port} (from HTTPS_PROXY, CONNECT tunnel)" in proc.stderr
    assert not [s for s in SECRETS if s in _outputs(proc, tmp_path / "r.json")]


@pytest.mark.parametrize(
    ("extra_env", "extra_args", "proxied"),
    [
        ({}, [], True),
        ({"NO_PROXY": "127.0.0.1"}, [], False),
        ({}, ["--ignore-proxy-env"], False),
    ],
    ids=["HTTP_PROXY", "NO_PROXY", "ignore-proxy-env"],
)
def test_nc06_server_metrics_scrape_takes_the_route_of_the_load(tmp_path, extra_env, extra_args, proxied):
    with ScriptedServer(_reply_with_metrics) as origin, ForwardProxy(require=TOKEN) as proxy:
        proc = _run(
            _load_args(origin.base_url, tmp_path, *extra_args, server_metrics="auto"),
            {"HTTP_PROXY": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}", **extra_env},
        )
        seen, received, base_url = proxy.log, origin.requests, origin.base_url
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["requests"]["succeeded"] == 6
    # scraped before the load and after it, and nothing failed: the server block holds the scraped counters
    assert [(e["url"], e["failed_scrapes"]) for e in results["server"]["endpoints"]] == [(f"{base_url}/metrics", 0)]
    scrapes = [r for r in received if r.path == "/metrics"]
    assert len(scrapes) >= 2
    assert all("proxy-authorization" not in r.headers for r in received)
    if proxied:  # every request the origin answered, the scrapes included, came through the proxy
        assert [(r.method, r.target) for r in seen] == [(r.method, f"{base_url}{r.path}") for r in received]
        assert {r.proxy_authorization for r in seen} == {TOKEN}
    else:
        assert seen == []
    assert not [s for s in SECRETS if s in _outputs(proc, tmp_path / "r.json", tmp_path / "requests.jsonl")]


def test_nc06_server_metrics_scrape_of_an_https_target_uses_the_connect_tunnel(tmp_path, tls_server):  # noqa: F811
    port = tls_server.rsplit(":", 1)[1]
    args = [
        "-f", "locustfiles/chat.py", "--headless", "-H", tls_server, "--insecure", "-u", "1", "-r", "1",
        "--num-requests", "3", "-t", "60s", "--results-json", str(tmp_path / "r.json"),
    ]  # fmt: skip
    with ForwardProxy(require=TOKEN) as proxy:
        env = {"HTTPS_PROXY": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}", "HTTP_PROXY": "http://127.0.0.1:9"}
        proc = _run(args, env)
        seen = proxy.log
    assert proc.returncode == 0, proc.stderr[-3000:]
    # model list, the first scrape, probe and 3 requests: 6 tunnels, each with the proxy's credentials
    assert [(r.method, r.target, r.proxy_authorization) for r in seen] == [("CONNECT", f"127.0.0.1:{port}", TOKEN)] * 6
    # the scrape reached the origin through the tunnel: what ended it is the answer (JSON, not Prometheus text)
    assert f"no Prometheus metrics at {tls_server}/metrics" in proc.stderr
    # a bare "407" also matches log timestamps (",407" milliseconds): look for the status as a status
    assert not PROXY_407.search(proc.stderr)
    assert not [s for s in ("Tunnel connection failed", "Connection refused") if s in proc.stderr]
    assert not [s for s in SECRETS if s in _outputs(proc, tmp_path / "r.json")]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_nc06_proxy_refusing_credentials_stops_before_load_without_showing_them(tmp_path, scheme, tls_server):  # noqa: F811
    target = tls_server if scheme == "https" else None
    with ScriptedServer(_reply) as origin, ForwardProxy(require="Basic bm90LXRoaXM=") as proxy:
        args = [
            "-f", "locustfiles/chat.py", "--headless", "-H", target or origin.base_url, "--insecure",
            "-u", "1", "--num-requests", "2", "-t", "30s",
        ]  # fmt: skip
        proc = _run(args, {f"{scheme}_proxy": f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}"}, timeout_s=60)
        received, proxy_port = origin.requests, proxy.port
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert PROXY_407.search(proc.stderr), proc.stderr[-3000:]
    assert received == []
    assert f"proxy http://127.0.0.1:{proxy_port}" in proc.stderr
    assert not [s for s in SECRETS if s in _outputs(proc)]


def test_nc06_dead_proxy_is_named_not_the_server(tmp_path):
    """Issue 24: HTTP_PROXY pointing at a port nothing listens on stopped the run with "cannot reach
    http://SERVER/v1/models ... Is the server up and -H right?" although the server was up and never
    contacted. Now the proxy and its variable are named, with the fixes."""
    dead = f"http://127.0.0.1:{free_port()}"
    with ScriptedServer(_reply) as origin:
        host = origin.base_url
        proc = _run(_load_args(host, tmp_path), {"HTTP_PROXY": dead})
        assert origin.requests == []
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = next(line for line in proc.stderr.splitlines() if line.startswith("llmload: error: "))
    assert f"cannot reach the proxy for {host}/v1/models" in line
    assert f"the proxy {dead} (from HTTP_PROXY) is not reachable: ECONNREFUSED" in line
    assert "--ignore-proxy-env" in line
    assert "Is the server up" not in line
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["blocked"] == line.removeprefix("llmload: error: ")

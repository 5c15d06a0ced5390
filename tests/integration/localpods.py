"""Run a rendered kustomize overlay's pods as local processes: the manifests without a cluster.

What a cluster gives each pod is emulated on this machine, from the rendered objects:

- the image: k8s/Dockerfile's final-stage ``ENV`` and ``WORKDIR``, with its paths mapped
  (``/opt/llmload`` → this virtual environment, ``/app`` → the repository);
- volumes: one directory per pod and volume; ConfigMap and Secret volumes hold their keys
  as files; ``mountPath`` prefixes in args, env and mounted files become those directories;
- env: ``env`` values, ``valueFrom`` and ``envFrom`` of ConfigMaps and Secrets (the test
  supplies the Secrets; an absent optional one is skipped, as the kubelet does);
- network: in a cluster every pod has its own ports. Here every Service port and container
  port gets a private free loopback port, Service names become 127.0.0.1, and a port a
  program listens on without being told (``DEFAULT_LISTENERS``) is moved with its
  ``LOCUST_*`` variables. Bind-all addresses become 127.0.0.1: tests reach only loopback.
- init containers run in order before the main container; a failed one fails the pod.

Each pod's containers write stdout and stderr to one log file (as ``kubectl logs`` shows
them). Every process runs in its own session; ``LocalCluster.kill_all`` ends what it started.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.procs import free_port

__all__ = ["DEFAULT_LISTENERS", "Image", "LocalCluster", "LocalPod", "image_config"]

REPO_ROOT = Path(__file__).resolve().parents[2]
# The image's paths (k8s/Dockerfile): its virtual environment and its WORKDIR with the locustfiles.
IMAGE_PATHS = {"/opt/llmload": Path(sys.prefix), "/app": REPO_ROOT}
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the python base image's PATH
# Ports other processes on this machine use; a test never binds them.
RESERVED_PORTS = frozenset({5557, 8089, 9646})
# Ports programs listen on by default (each pod has its own network namespace in a cluster):
# container port → the variables that move the listener to a private loopback port here.
DEFAULT_LISTENERS = {
    5557: ("LOCUST_MASTER_BIND_HOST", "LOCUST_MASTER_BIND_PORT"),  # Locust's master RPC
    9646: ("LOCUST_PROMETHEUS_HOST", "LOCUST_PROMETHEUS_PORT"),  # llmload's exporter
}
_INIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Image:
    """What the containers inherit from the image: ENV, WORKDIR and ENTRYPOINT."""

    env: dict[str, str]
    workdir: str
    entrypoint: list[str]


def image_config(dockerfile: Path) -> Image:
    """The final stage's ``ENV`` (``$VAR`` expanded in order), ``WORKDIR`` and ``ENTRYPOINT`` of a Dockerfile."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    final = re.split(r"^FROM\s", text, flags=re.MULTILINE)[-1]
    env: dict[str, str] = {"PATH": BASE_PATH}
    workdir, entrypoint = "/", []
    for line in final.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), value)
        elif word == "WORKDIR":
            workdir = rest.strip()
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(rest)
    return Image(env, workdir, entrypoint)


@dataclass
class _Container:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path


class LocalPod:
    """One pod: its init containers in order, then its main container, in a background thread."""

    def __init__(
        self, name: str, inits: list[_Container], main: _Container, log_path: Path, mounts: dict[str, Path]
    ) -> None:
        self.name = name
        self.mounts = mounts  # the main container's mountPath → local directory
        self.log_path = log_path
        self._inits, self._main = inits, main
        self._current: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._killed = False
        self.main_process: subprocess.Popen[bytes] | None = None
        self.init_status: int | None = None  # the failed init container's exit status
        self._main_started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{name}", daemon=True)
        self._thread.start()

    def _spawn(self, c: _Container, log: Any) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self._killed:
                return None
            self._current = subprocess.Popen(
                c.argv, env=c.env, cwd=c.cwd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
            return self._current

    def _run(self) -> None:
        with self.log_path.open("ab", buffering=0) as log:
            for init in self._inits:
                proc = self._spawn(init, log)
                if proc is None:
                    return
                try:
                    status = proc.wait(_INIT_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.kill()
                    status = proc.wait()
                if status != 0:
                    self.init_status = status
                    self._main_started.set()
                    return
            self.main_process = self._spawn(self._main, log)
            self._main_started.set()

    def running_init(self) -> bool:
        """Whether an init container is running now."""
        return not self._main_started.is_set() and self._current is not None and self._current.poll() is None

    def ended(self) -> bool:
        """Whether the pod has ended (an init container failed, or the main container exited)."""
        if not self._main_started.is_set():
            return False
        return self.main_process is None or self.main_process.poll() is not None

    def wait_main(self, timeout_s: float) -> subprocess.Popen[bytes]:
        """The main container's process once it has started (raises when an init container failed)."""
        if not self._main_started.wait(timeout_s):
            raise TimeoutError(f"{self.name}: main container not started after {timeout_s} s")
        if self.main_process is None:
            raise RuntimeError(f"{self.name}: init container exited {self.init_status}:\n{self.log()[-3000:]}")
        return self.main_process

    def wait(self, timeout_s: float) -> int:
        """The pod's exit status: the failed init container's, else the main container's (bounded)."""
        deadline = time.monotonic() + timeout_s
        if not self._main_started.wait(timeout_s):
            raise TimeoutError(f"{self.name}: still in its init containers after {timeout_s} s")
        if self.main_process is None:
            assert self.init_status is not None
            return self.init_status
        return self.main_process.wait(max(0.0, deadline - time.monotonic()))

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the main container's process (SIGTERM: what deleting the Job does)."""
        self.wait_main(0).send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the pod's processes; no container starts after this."""
        with self._lock:
            self._killed = True
            for proc in (self._current, self.main_process):
                if proc is not None and proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)

    def local_path(self, path: str) -> Path:
        """Where a file the main container writes at ``path`` (on one of its volumes) is here."""
        for mount, local in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if path.startswith(mount.rstrip("/") + "/"):
                return local / path[len(mount.rstrip("/")) + 1 :]
        raise AssertionError(f"{self.name}: {path} is on no volume (mounts: {sorted(self.mounts)})")

    def log(self) -> str:
        """Everything the pod's containers wrote so far (stdout and stderr interleaved)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class LocalCluster:
    """The rendered objects of one overlay, ready to run their pods on this machine.

    Args:
        docs: the rendered objects (``kubectl kustomize`` output).
        workdir: where volumes and logs go.
        secrets: Secret name → key → value (Secrets are not part of the overlay).
        dockerfile: the image the containers run (its ENV and WORKDIR).
    """

    def __init__(
        self, docs: list[dict[str, Any]], workdir: Path, secrets: dict[str, dict[str, str]], dockerfile: Path
    ) -> None:
        self.docs = docs
        self.workdir = workdir
        self.secrets = secrets
        self.image = image_config(dockerfile)
        self.services = [d for d in docs if d["kind"] == "Service"]
        self.pods: list[LocalPod] = []
        self.service_ports: dict[tuple[str, str], int] = {}  # (Service, port name) → local port
        self._ports: dict[int, int] = {}  # cluster port number (Service or container) → local port
        self._map_ports()

    # ── objects ──
    def workload(self, name: str) -> dict[str, Any]:
        """The Deployment or Job ``name``."""
        found = [d for d in self.docs if d["kind"] in {"Deployment", "Job"} and d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one Deployment or Job {name}, found {len(found)}"
        return found[0]

    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name), None)

    # ── network ──
    def _local_port(self, cluster_port: int) -> int:
        if cluster_port not in self._ports:
            port = free_port()
            assert port not in RESERVED_PORTS
            self._ports[cluster_port] = port
        return self._ports[cluster_port]

    def _map_ports(self) -> None:
        """One private loopback port per Service port and the container port behind it."""
        for svc in self.services:
            selector = svc["spec"]["selector"]
            backends = [
                w
                for w in self.docs
                if w["kind"] in {"Deployment", "Job"}
                and all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())
            ]
            assert len(backends) == 1, f"Service {svc['metadata']['name']} selects {len(backends)} workloads"
            ports = {p["name"]: p["containerPort"] for c in _containers(backends[0]) for p in c.get("ports", [])}
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                container_port = ports[target] if isinstance(target, str) else target
                local = self._local_port(container_port)
                assert self._ports.setdefault(port["port"], local) == local, f"port {port['port']} is ambiguous"
                self.service_ports[svc["metadata"]["name"], port.get("name", str(port["port"]))] = local

    def url(self, service: str, port_name: str) -> str:
        """``http://127.0.0.1:PORT`` of a Service port."""
        return f"http://127.0.0.1:{self.service_ports[service, port_name]}"

    # ── rewriting ──
    def _value(self, text: str, mounts: dict[str, Path]) -> str:
        """One string as the local process must see it: paths, Service names, bind addresses."""
        paths = {**IMAGE_PATHS, **mounts}
        alternatives = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
        text = re.sub(rf"(?<![\w.-])({alternatives})(?![\w.-])", lambda m: str(paths[m[1]]), text)  # one pass
        for svc in self.services:
            name = re.escape(svc["metadata"]["name"])
            numbers = {p["port"] for p in svc["spec"]["ports"]}
            text = re.sub(rf"(?<![\w.-]){name}(?:\.[\w.-]+)?:(\d+)", functools.partial(self._host_port, numbers), text)
            text = re.sub(rf"^{name}(?:\.[\w.-]+)?$", "127.0.0.1", text)
        return "127.0.0.1" if text in {"0.0.0.0", "*", "::"} else text

    def _host_port(self, numbers: set[int], m: re.Match[str]) -> str:
        return f"127.0.0.1:{self._ports[int(m[1])]}" if int(m[1]) in numbers else m[0]

    def _port_value(self, text: str) -> str:
        return str(self._ports[int(text)]) if text.isdigit() and int(text) in self._ports else text

    def _args(self, args: list[str], mounts: dict[str, Path]) -> list[str]:
        out: list[str] = []
        for arg in args:
            flag, eq, value = arg.partition("=")
            if eq and flag.startswith("--"):
                value = self._value(value, mounts)
                out.append(f"{flag}={self._port_value(value) if flag.endswith('port') else value}")
            elif out and out[-1].startswith("--") and out[-1].endswith("port"):
                out.append(self._port_value(arg))
            else:
                out.append(self._value(arg, mounts))
        return out

    def _file(self, key: str, text: str, mounts: dict[str, Path]) -> str:
        """A mounted file: ``key = value`` lines (locust.conf) get their values rewritten."""
        if not key.endswith(".conf"):
            return text
        lines = []
        for line in text.splitlines():
            name, eq, value = line.partition("=")
            if eq and not line.lstrip().startswith("#"):
                value = self._value(value.strip(), mounts)
                lines.append(f"{name.strip()} = {self._port_value(value) if name.strip().endswith('port') else value}")
            else:
                lines.append(line)
        return "\n".join(lines) + "\n"

    # ── pods ──
    def _source(self, ref: dict[str, Any], kind: str) -> dict[str, str] | None:
        name = ref["name"]
        if kind == "Secret":
            return self.secrets.get(name)
        obj = self._object("ConfigMap", name)
        return None if obj is None else dict(obj.get("data", {}))

    def _volumes(self, pod_dir: Path, spec: dict[str, Any]) -> dict[str, tuple[Path, dict[str, str]]]:
        """Volume name → (directory, files to write there)."""
        out: dict[str, tuple[Path, dict[str, str]]] = {}
        for volume in spec.get("volumes", []):
            path = pod_dir / volume["name"]
            path.mkdir(parents=True, exist_ok=True)
            files: dict[str, str] = {}
            if "configMap" in volume or "secret" in volume:
                kind = "ConfigMap" if "configMap" in volume else "Secret"
                source = volume["configMap" if kind == "ConfigMap" else "secret"]
                ref = {"name": source.get("name", source.get("secretName"))}
                data = self._source(ref, kind)
                if data is None and not source.get("optional"):
                    raise AssertionError(f"{kind} {ref['name']} (volume {volume['name']}) does not exist")
                files = data or {}
            elif not {"emptyDir", "persistentVolumeClaim"} & set(volume):
                raise AssertionError(f"volume {volume['name']}: only emptyDir, PVC, ConfigMap, Secret are emulated")
            out[volume["name"]] = (path, files)
        return out

    def _env(self, c: dict[str, Any], mounts: dict[str, Path], extra: dict[str, str]) -> dict[str, str]:
        env = {k: self._value(v, mounts) for k, v in self.image.env.items() if k != "PATH"}
        # Each PATH entry is mapped once: mapping the mapped value again would rewrite a checkout under /tmp.
        env["PATH"] = ":".join(self._value(p, mounts) for p in self.image.env["PATH"].split(":"))
        for source in c.get("envFrom", []):
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            ref = source["secretRef" if kind == "Secret" else "configMapRef"]
            data = self._source(ref, kind)
            if data is None and not ref.get("optional"):
                raise AssertionError(f"envFrom: {kind} {ref['name']} does not exist")
            env.update({source.get("prefix", "") + k: v for k, v in (data or {}).items()})
        for item in c.get("env", []):
            if "value" in item:
                value = self._value(item["value"], mounts)
                env[item["name"]] = self._port_value(value) if item["name"].endswith("PORT") else value
            elif "valueFrom" in item:
                (kind_key, ref), *_ = item["valueFrom"].items()
                kind = {"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret"}[kind_key]
                data = self._source(ref, kind) or {}
                if ref["key"] in data:
                    env[item["name"]] = self._value(data[ref["key"]], mounts)
                elif not ref.get("optional"):
                    raise AssertionError(f"env {item['name']}: {kind} {ref['name']} has no key {ref['key']}")
        # Listeners on a program's default port move to the port this pod's container port got.
        mentioned = " ".join(c.get("args", []))
        for port in c.get("ports", []):
            number = port["containerPort"]
            if str(number) in mentioned:
                continue
            assert number in DEFAULT_LISTENERS, f"{c['name']}: how does it listen on {number}? (DEFAULT_LISTENERS)"
            host_var, port_var = DEFAULT_LISTENERS[number]
            env.setdefault(host_var, "127.0.0.1")
            env.setdefault(port_var, str(self._local_port(number)))
        env.update(extra)
        return env

    def start(self, workload: str, index: int = 0, env: dict[str, str] | None = None) -> LocalPod:
        """Start pod ``index`` of ``workload`` (a Deployment replica or an Indexed Job's pod)."""
        obj = self.workload(workload)
        spec = obj["spec"]["template"]["spec"]
        pod_name = f"{workload}-{index}"
        pod_dir = self.workdir / pod_name
        volumes = self._volumes(pod_dir, spec)
        extra = dict(env or {})
        if obj["kind"] == "Job" and obj["spec"].get("completionMode") == "Indexed":
            extra.setdefault("JOB_COMPLETION_INDEX", str(index))
        built, mounts = [], {}
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            mounts = {m["mountPath"]: volumes[m["name"]][0] for m in c.get("volumeMounts", [])}
            for m in c.get("volumeMounts", []):
                directory, files = volumes[m["name"]]
                for key, text in files.items():
                    (directory / key).write_text(self._file(key, text, mounts))
            cwd = Path(self._value(c.get("workingDir", self.image.workdir), mounts))
            command = [self._value(a, mounts) for a in c.get("command", self.image.entrypoint)]
            argv = command + self._args(c.get("args", []), mounts)
            built.append(_Container(c["name"], argv, self._env(c, mounts, extra), cwd))
        pod = LocalPod(pod_name, built[:-1], built[-1], self.workdir / f"{pod_name}.log", mounts)
        assert len(spec["containers"]) == 1, f"{workload}: one container per pod is emulated"
        self.pods.append(pod)
        return pod

    def kill_all(self) -> None:
        """SIGKILL every process this cluster started."""
        for pod in self.pods:
            pod.kill()


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return containers

"""The Kubernetes manifests (k8s/): every overlay renders, validates and is consistent.

Rendering needs ``kubectl`` (its built-in kustomize); without it these tests skip
and say so. Validation uses the Kubernetes OpenAPI schemas shipped in the
``kubernetes-validate`` package (offline), strict mode: unknown fields fail.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmload.settings.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
# Two or more current minor versions; the newest is the newest the schema package knows.
K8S_VERSIONS = ("1.35.0", "1.36.0", "1.37.0")
# Custom resources whose schema is not part of Kubernetes; checked by the consistency tests.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "PodMonitor")}
FINAL_REPORT_WAIT_S = 30  # README "Stopping": the master waits --stop-timeout + 30 s for final reports
POD_KINDS = {"Job", "Deployment"}


def _kubectl() -> str:
    found = shutil.which("kubectl") or shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("kubectl is not installed (it renders the kustomize overlays); .ci/run installs it")
    return found


@functools.cache
def _render_dir(path: Path) -> tuple[dict[str, Any], ...]:
    out = subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, f"kubectl kustomize {path} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(overlay: str) -> tuple[dict[str, Any], ...]:
    return _render_dir(K8S / "overlays" / overlay)


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(obj)["containers"] if c["name"] == name)


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in POD_KINDS]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def locust_conf(docs: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """The overlay's locust.conf as key → value (the ConfigMap the Jobs mount)."""
    master = one(docs, "Job", "llmload-master")
    cm_name = next(v["configMap"]["name"] for v in pod_spec(master)["volumes"] if v["name"] == "config")
    text = one(docs, "ConfigMap", cm_name)["data"]["locust.conf"]
    conf = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            conf[key.strip()] = value.strip()
    return conf


def flag_value(args: list[str], flag: str) -> str:
    for arg in args:
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{flag}=... not in {args}")


def _in_locust(code: str) -> str:
    """Run ``code`` in a fresh interpreter: importing Locust monkey-patches, so never in the test process."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


@functools.cache
def known_flags() -> frozenset[str]:
    """Every long option Locust or llmload accepts (Locust's from its own parser's help)."""
    help_text = _in_locust("from locust.argument_parser import get_parser; print(get_parser().format_help())")
    locust_flags = set(re.findall(r"--[a-z0-9][a-z0-9-]*", help_text))
    return frozenset(locust_flags | {spec.flag for spec in OPTIONS})


@functools.cache
def parse_timespan(text: str) -> int:
    """Seconds in a Locust time span such as ``5m`` or ``4h``, as Locust reads --run-time."""
    return int(_in_locust(f"from locust.util.timespan import parse_timespan; print(parse_timespan({text!r}))"))


# ── (a) rendering ───────────────────────────────────────────────────────
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_overlay_renders_master_workers_service_and_config(overlay):
    docs = render(overlay)
    for kind, name in [
        ("Job", "llmload-master"),
        ("Job", "llmload-workers"),
        ("Service", "llmload-master"),
        ("ServiceAccount", "llmload"),
    ]:
        one(docs, kind, name)
    assert "locustfile" in locust_conf(docs)


def test_k8s_overlays_are_smoke_and_soak():
    assert {"smoke", "soak"} <= set(OVERLAYS)


# ── (b) Kubernetes OpenAPI schemas, strict ──────────────────────────────
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_every_object_validates_strictly(overlay, version):
    checked = 0
    for doc in render(overlay):
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{overlay}: {doc['kind']}/{doc['metadata']['name']} at {where}: {exc.message}")
        checked += 1
    assert checked >= 5


def test_k8s_strict_validation_rejects_an_unknown_field():
    job = json.loads(json.dumps(one(render("smoke"), "Job", "llmload-master")))
    pod_spec(job)["containers"][0]["ulimits"] = [{"name": "nofile", "soft": 65536}]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)


# ── (c) consistency ─────────────────────────────────────────────────────
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_worker_count_agrees_everywhere(overlay):
    docs = render(overlay)
    workers = one(docs, "Job", "llmload-workers")["spec"]
    master = container(one(docs, "Job", "llmload-master"), "master")
    expect = next(e["value"] for e in master["env"] if e["name"] == "LOCUST_EXPECT_WORKERS")
    assert isinstance(expect, str)
    assert workers["parallelism"] == workers["completions"] == workers["maxFailedIndexes"] == int(expect)
    assert "expect-workers" not in locust_conf(docs)  # a second place would disagree one day


def test_k8s_worker_count_is_set_in_one_place(tmp_path):
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    shutil.copytree(ROOT / "grafana", tmp_path / "grafana")
    kustomization = copy / "overlays" / "soak" / "kustomization.yaml"
    text = kustomization.read_text()
    patched = re.sub(r"(path: /spec/parallelism\n\s+value: )\d+", r"\g<1>3", text)
    assert patched != text
    kustomization.write_text(patched)
    docs = _render_dir(copy / "overlays" / "soak")
    workers = one(docs, "Job", "llmload-workers")["spec"]
    master = container(one(docs, "Job", "llmload-master"), "master")
    assert workers["parallelism"] == workers["completions"] == workers["maxFailedIndexes"] == 3
    assert {"name": "LOCUST_EXPECT_WORKERS", "value": "3"} in master["env"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_selectors_match_pod_labels(overlay):
    docs = render(overlay)
    pods = {d["metadata"]["name"]: pod_labels(d) for d in workloads(docs)}
    for svc in (d for d in docs if d["kind"] == "Service"):
        chosen = [name for name, labels in pods.items() if selects(svc["spec"]["selector"], labels)]
        assert len(chosen) == 1, f"Service {svc['metadata']['name']} selects {chosen}"
    assert [
        n for n, labels in pods.items() if selects(one(docs, "Service", "llmload-master")["spec"]["selector"], labels)
    ] == ["llmload-master"]
    for deploy in (d for d in docs if d["kind"] == "Deployment"):
        assert selects(deploy["spec"]["selector"]["matchLabels"], pod_labels(deploy))
    workers = one(docs, "Job", "llmload-workers")
    for spread in pod_spec(workers)["topologySpreadConstraints"]:
        assert selects(spread["labelSelector"]["matchLabels"], pod_labels(workers))
        assert not selects(spread["labelSelector"]["matchLabels"], pods["llmload-master"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_named_ports_exist_on_the_containers(overlay):
    docs = render(overlay)
    for svc in (d for d in docs if d["kind"] == "Service"):
        target = next(w for w in workloads(docs) if selects(svc["spec"]["selector"], pod_labels(w)))
        names = {p["name"] for c in pod_spec(target)["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, f"{svc['metadata']['name']}: no container port {port['targetPort']}"
    for workload in workloads(docs):
        for c in pod_spec(workload)["containers"]:
            names = {p["name"] for p in c.get("ports", [])}
            probe = c.get("readinessProbe", {}).get("httpGet")
            if probe:
                assert probe["port"] in names


def test_k8s_master_ports_match_options():
    docs = render("soak")
    ports = {p["name"]: p["containerPort"] for p in container(one(docs, "Job", "llmload-master"), "master")["ports"]}
    prometheus_default = next(s.default for s in OPTIONS if s.flag == "--prometheus-port")
    assert ports == {"rpc": 5557, "metrics": prometheus_default}
    worker = container(one(docs, "Job", "llmload-workers"), "worker")
    assert flag_value(worker["args"], "--master-host") == "llmload-master"
    assert int(flag_value(worker["args"], "--master-port")) == ports["rpc"]


def test_k8s_soak_podmonitor_selects_the_master_only():
    docs = render("soak")
    monitor = one(docs, "PodMonitor", "llmload-master")
    selector = monitor["spec"]["selector"]["matchLabels"]
    chosen = [w["metadata"]["name"] for w in workloads(docs) if selects(selector, pod_labels(w))]
    assert chosen == ["llmload-master"]
    master_ports = {p["name"] for p in container(one(docs, "Job", "llmload-master"), "master")["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= master_ports
    # The final totals outlive the run until one scrape: the grace covers the scrape interval.
    interval_s = max(parse_timespan(e["interval"]) for e in monitor["spec"]["podMetricsEndpoints"])
    assert float(locust_conf(docs)["prometheus-grace"]) >= interval_s


def test_k8s_soak_dashboard_configmap_is_the_repository_dashboard():
    cm = one(render("soak"), "ConfigMap", "llmload-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    repo = json.loads((ROOT / "grafana" / "llmload-dashboard.json").read_text())
    assert json.loads(cm["data"]["llmload-dashboard.json"]) == repo


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_config_and_env_keys_are_known_options(overlay):
    docs = render(overlay)
    known = known_flags()
    for key in locust_conf(docs):
        assert f"--{key}" in known, f"{overlay} locust.conf: {key!r} is no Locust or llmload option"
    for job in (d for d in docs if d["kind"] == "Job"):
        for c in pod_spec(job)["containers"]:
            for env in c.get("env", []):
                if env["name"].startswith("LOCUST_"):
                    flag = "--" + env["name"].removeprefix("LOCUST_").lower().replace("_", "-")
                    assert flag in known, f"{overlay}: env {env['name']} is no option"
            for arg in c["args"]:
                assert arg.split("=", 1)[0] in known, f"{overlay}: argument {arg!r} is no option"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_pods_meet_the_restricted_pod_security_standard(overlay):
    docs = render(overlay)
    assert one(docs, "ServiceAccount", "llmload")["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] in {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}]
    for workload in workloads(docs):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["serviceAccountName"] == "llmload"
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
        assert all("hostPath" not in v for v in spec.get("volumes", []))
        for c in spec["containers"] + spec.get("initContainers", []):
            ctx = c["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            assert ctx["readOnlyRootFilesystem"] is True, name
        for c in spec["containers"]:
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts, f"{name}: HOME=/tmp needs a writable volume"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_deadlines_and_grace_cover_the_run(overlay):
    docs = render(overlay)
    conf = locust_conf(docs)
    master_job = one(docs, "Job", "llmload-master")
    workers_job = one(docs, "Job", "llmload-workers")
    master = container(master_job, "master")
    stop_s = float(conf["stop-timeout"]) + FINAL_REPORT_WAIT_S + float(conf["prometheus-grace"])
    for job in (master_job, workers_job):
        assert pod_spec(job)["terminationGracePeriodSeconds"] > stop_s
        assert job["spec"]["ttlSecondsAfterFinished"] > 0
        assert job["spec"]["backoffLimit" if job is master_job else "backoffLimitPerIndex"] == 0
        assert pod_spec(job)["restartPolicy"] == "Never"
    longest_s = (
        sum(float(c["args"][-1]) for c in pod_spec(master_job).get("initContainers", []))  # waits, seconds
        + float(flag_value(master["args"], "--expect-workers-max-wait"))
        + parse_timespan(conf["run-time"])
        + pod_spec(master_job)["terminationGracePeriodSeconds"]
    )
    assert master_job["spec"]["activeDeadlineSeconds"] > longest_s
    assert workers_job["spec"]["activeDeadlineSeconds"] >= master_job["spec"]["activeDeadlineSeconds"]
    # Locust workers retry the master for 60 x 5 s; the master gives up on them sooner.
    assert float(flag_value(master["args"], "--expect-workers-max-wait")) < 300


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_one_core_per_worker_spread_over_nodes(overlay):
    workers = one(render(overlay), "Job", "llmload-workers")
    resources = container(workers, "worker")["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "1"
    spread = pod_spec(workers)["topologySpreadConstraints"]
    assert [s["topologyKey"] for s in spread] == ["kubernetes.io/hostname"]
    assert flag_value(container(workers, "worker")["args"], "--exit-code-on-error") == "0"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_results_go_to_the_results_volume(overlay):
    docs = render(overlay)
    master_job = one(docs, "Job", "llmload-master")
    master = container(master_job, "master")
    path = flag_value(master["args"], "--results-json")
    mount = next(m for m in master["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod_spec(master_job)["volumes"] if v["name"] == mount["name"])
    if overlay == "soak":
        claim = volume["persistentVolumeClaim"]["claimName"]
        one(docs, "PersistentVolumeClaim", claim)
    else:
        assert "emptyDir" in volume


def test_k8s_smoke_targets_the_in_cluster_sim_with_one_worker():
    docs = render("smoke")
    conf = locust_conf(docs)
    sim_port = one(docs, "Service", "llmload-sim")["spec"]["ports"][0]["port"]
    assert conf["host"] == f"http://llmload-sim:{sim_port}"
    assert parse_timespan(conf["run-time"]) == 300
    assert one(docs, "Job", "llmload-workers")["spec"]["parallelism"] == 1
    sim = container(one(docs, "Deployment", "llmload-sim"), "sim")
    assert sim["command"] == ["llmload", "sim"]
    assert flag_value([f"{a}={b}" for a, b in zip(sim["args"][::2], sim["args"][1::2], strict=True)], "--port") == str(
        sim["ports"][0]["containerPort"]
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_every_container_runs_the_image_set_in_the_base(overlay):
    base = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())["images"][0]
    image = f"{base['newName']}:{base['newTag']}"
    for workload in workloads(render(overlay)):
        spec = pod_spec(workload)
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["image"] == image, f"{overlay}: {workload['metadata']['name']}/{c['name']} runs {c['image']}"


def test_k8s_smoke_master_waits_for_the_sim_before_checking_it():
    docs = render("smoke")
    sim_port = one(docs, "Service", "llmload-sim")["spec"]["ports"][0]["port"]
    probe = container(one(docs, "Deployment", "llmload-sim"), "sim")["readinessProbe"]["httpGet"]["path"]
    (wait,) = pod_spec(one(docs, "Job", "llmload-master"))["initContainers"]
    assert wait["args"][0] == f"http://llmload-sim:{sim_port}{probe}"


def test_k8s_smoke_wait_for_the_sim_gives_up_with_a_clear_line(tmp_path):
    """Run the init container's command against a port nothing listens on, with a 1 s limit."""
    (wait,) = pod_spec(one(render("smoke"), "Job", "llmload-master"))["initContainers"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/health"  # bound, not listening: refused
        argv = [sys.executable, *wait["command"][1:], url, "1"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 1
    assert f"llmload: {url} not ready after 1 s" in out.stderr
    assert wait["command"][0] == "python"


def test_k8s_container_command_raises_open_files_and_runs_locust():
    """The pods' wrapper: raise the soft open-file limit to the hard one, then exec locust with the args."""
    command = container(one(render("smoke"), "Job", "llmload-master"), "master")["command"]
    script = command[2] + "; "  # the wrapper, then the limit as the process sees it
    bin_dir = str(Path(sys.executable).parent)
    probe = [*command[:2], script.replace('exec locust "$@"', 'ulimit -n; exec locust "$@"'), *command[3:], "--version"]
    out = subprocess.run(
        probe, capture_output=True, text=True, timeout=60, check=False, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    assert out.returncode == 0, out.stderr
    limit, version = out.stdout.splitlines()[0], out.stdout
    hard = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True, check=True).stdout.strip()
    assert limit == hard
    assert "locust" in version


def test_k8s_readme_quick_start_uses_the_smoke_overlay_and_names_the_worker_count():
    readme = (K8S / "README.md").read_text()
    assert "kubectl kustomize k8s/overlays/smoke" in readme or "kubectl apply -k k8s/overlays/smoke" in readme
    assert "parallelism" in readme
    assert "--expect-workers-max-wait" in readme
    assert "LLMLOAD_RESULTS" in readme


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_results_reader_pod_validates_and_mounts_the_soak_claim(version):
    reader = yaml.safe_load((K8S / "results-reader.yaml").read_text())
    kubernetes_validate.validate(reader, version, strict=True)
    claim = reader["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    one(render("soak"), "PersistentVolumeClaim", claim)
    assert reader["spec"]["securityContext"]["runAsNonRoot"] is True

"""The Kubernetes soak Job: one master, N workers that agree on N, llmload options that exist."""

from pathlib import Path

import yaml

from llmload.options import OPTIONS

MANIFEST = Path(__file__).resolve().parents[2] / "k8s" / "llmload-soak.yaml"


def test_k8s_manifest_workers_agree_and_options_exist():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(MANIFEST.read_text())}
    config = docs[("ConfigMap", "llmload-config")]["data"]
    workers = docs[("Job", "llmload-workers")]["spec"]
    assert int(config["LOCUST_EXPECT_WORKERS"]) == workers["parallelism"] == workers["completions"]
    known = {spec.env for spec in OPTIONS}
    assert "LOCUST_MAX_TOKENS" in config
    assert "LOCUST_MAX_TOKENS" in known
    master = docs[("Job", "llmload-master")]["spec"]["template"]["spec"]["containers"][0]
    assert "--master" in master["args"]
    assert "--results-json" in master["args"]
    worker = workers["template"]["spec"]["containers"][0]
    assert worker["args"][:3] == ["--worker", "--master-host", "llmload-master"]
    ports = {p["port"] for p in docs[("Service", "llmload-master")]["spec"]["ports"]}
    assert {5557, 8089, 9646} <= ports  # Locust RPC, web UI, Prometheus exporter


def test_p7_k8s_readme_says_parallelism_completions_and_expected_workers_change_together():
    readme = (MANIFEST.parent / "README.md").read_text()
    step = readme.split("\n2. ", 1)[1].split("\n3. ", 1)[0]
    for name in ("`parallelism`", "`completions`", "`LOCUST_EXPECT_WORKERS`"):
        assert name in step
    assert "same number" in step

"""The web UI's form behaves (issue 10, B1-B5, B8): posts to a real `locust` web UI over `llmload sim`.

No browser: the form is posted as the web UI posts it (``/swarm``,
``/stats/reset``, ``/stop``), and the answers and ``/stats/requests`` are
read back. Every process and wait is bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.settings.options import OPTIONS
from tests.integration.procs import final_results_written
from tests.integration.test_sim import metric_sum, metrics
from tests.integration.webui import WebUI, web_ui

pytestmark = pytest.mark.integration


def _refused(answer: dict[str, object], *words: str) -> None:
    assert answer["success"] is False, answer
    message = str(answer["message"])
    for word in words:
        assert word in message, message


def _sim_posts(ui: WebUI) -> float:
    return metric_sum(metrics(ui.sim_url), "llmload_sim_requests_completed_total")


def _clean(ui: WebUI) -> str:
    _, stderr = ui.output()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "Uncaught exception" not in stderr, stderr[-3000:]
    return stderr


def _run_to_the_end(ui: WebUI, results: Path, n: int) -> dict[str, object]:
    """A valid post runs ``n`` requests (``--num-requests``), stops by itself and writes the results."""
    answer = ui.swarm(max_tokens="8")
    assert answer["success"] is True, answer
    ui.wait(
        lambda s: s["state"] == "stopped" and s["stats"][-1]["num_requests"] >= n and final_results_written(results),
        "the --num-requests run to stop and report",
    )
    assert ui.aggregated()["num_requests"] == n
    document: dict[str, object] = json.loads(results.read_text())
    return document


def test_b1_processes_2_invalid_value_is_refused_in_the_ui_then_a_valid_run_works(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "10", "--results-json", str(results), workers=2) as ui:
        _refused(ui.swarm(max_tokens="abc"), "--max-tokens", "'abc'")
        _refused(ui.swarm(max_tokens="8", user_count="1"), "2 workers", "1 user")  # one worker would never finish
        stats = ui.stats()
        assert stats["state"] == "ready"
        assert stats["worker_count"] == 2
        assert stats["user_count"] == 0
        assert _sim_posts(ui) == 0
        assert not results.exists()
        document = _run_to_the_end(ui, results, 10)
        assert document["requests"]["succeeded"] == 10  # type: ignore[index]
        assert "PASSED" in str(document["verdict"])
        _refused(ui.swarm(max_tokens="abc"), "--max-tokens")  # after a valid run: refused again, nothing sent
        sent = _sim_posts(ui)
        assert ui.stats()["state"] == "stopped"
        assert ui.aggregated()["num_requests"] == 10
        assert _sim_posts(ui) == sent
        _clean(ui)


def test_b2_single_process_invalid_value_wrong_model_and_unreachable_host_are_shown_in_the_ui(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "6", "--results-json", str(results)) as ui:
        _refused(ui.swarm(max_tokens="abc"), "--max-tokens", "'abc'")
        _refused(ui.swarm(model="no-such-model"), "no-such-model", "llmload-sim")
        _refused(ui.swarm(host="http://127.0.0.1:9"), "127.0.0.1:9", "cannot reach")
        # issue 24: an endpoint's whole URL as the host is refused with the other bad values, at its field
        endpoint = ui.sim_url + "/v1/chat/completions"
        answer = ui.swarm(host=endpoint, max_tokens="abc")
        _refused(answer, "2 invalid options", f"-H {endpoint} ends in an endpoint path", f"-H {ui.sim_url}")
        assert set(answer["llmload_fields"]) == {"host", "max_tokens"}
        assert ui.stats()["state"] == "ready"
        assert _sim_posts(ui) == 0
        document = _run_to_the_end(ui, results, 6)
        assert document["requests"]["succeeded"] == 6  # type: ignore[index]
        _clean(ui)


def test_b3_edit_that_changes_an_llmload_value_is_refused_not_ignored() -> None:
    with web_ui("--request-rate", "4") as ui:
        assert ui.swarm(max_tokens="8")["success"] is True
        ui.wait(lambda s: s["state"] == "running", "the run to start")
        _refused(ui.swarm(max_tokens="16", user_count="3"), "EDIT", "--max-tokens", "'8'", "'16'")
        assert ui.stats()["user_count"] == 2
        edit = ui.swarm(max_tokens="8", user_count="3")  # users only: Locust applies it
        assert edit["success"] is True, edit
        ui.wait(lambda s: s["user_count"] == 3, "3 users")
        ui.post("/stop")
        ui.wait(lambda s: s["state"] == "stopped", "the stop")
        _clean(ui)


def test_b4_reset_resets_llmload_statistics_with_locusts(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--request-rate", "20", "--results-json", str(results)) as ui:
        assert ui.swarm(max_tokens="4")["success"] is True
        ui.wait(lambda s: s["stats"] and s["stats"][-1]["num_requests"] >= 10, "10 requests")
        ui.reset()
        ui.wait(lambda s: s["stats"] and s["stats"][-1]["num_requests"] >= 5, "5 requests after RESET")
        ui.post("/stop")
        ui.wait(lambda s: s["state"] == "stopped", "the stop")
        stderr = _clean(ui)  # issue 24: the line says what was reset and what was kept
        assert "llmload: RESET in the web UI: statistics reset. Reset: requests, latencies" in stderr, stderr[-3000:]
        assert "Kept: the run itself" in stderr
        locust_total = ui.aggregated()["num_requests"]
        requests = json.loads(results.read_text())["requests"]
        assert requests["succeeded"] + requests["failed"] == locust_total
        assert _sim_posts(ui) >= locust_total + 10  # the reset dropped the first ten from both
        _clean(ui)


def test_stats_poll_right_after_start_reset_and_stop_shows_the_new_state_not_locusts_cached_answer(
    tmp_path: Path,
) -> None:
    """A poll right after Start answered "ready": Locust's cached answer (it caches ``/stats/requests``
    for 2 s), or the true state while llmload's test_start (the preflight) still ran. The page then
    showed the start form again and stopped polling, so the run never showed (the browser saturation
    test on the CI of 2026-12-03: URL on the LLM tab, page at READY, run over). RESET likewise answered
    with the figures from before it for up to 2 s."""
    results = tmp_path / "r.json"
    with web_ui("--request-rate", "20", "--results-json", str(results)) as ui:
        assert ui.stats()["state"] == "ready"  # the page's first poll: Locust caches this answer
        assert ui.swarm(max_tokens="4")["success"] is True
        assert ui.stats()["state"] in {"spawning", "running"}
        ui.wait(lambda s: s["stats"] and s["stats"][-1]["num_requests"] >= 20, "20 requests")
        before = ui.aggregated()["num_requests"]  # polled just now: cached for 2 s
        ui.post("/stats/reset")
        after = ui.aggregated()["num_requests"]
        assert after < before, (before, after)
        ui.post("/stop")
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the stop")
        _clean(ui)


def test_b5_launch_only_prometheus_options_are_not_in_the_form() -> None:
    with web_ui() as ui:
        page = ui.get("/").decode()
        assert "max_tokens" in page
        assert "num_requests" in page
        for name in ("prometheus_port", "prometheus_host", "prometheus_grace"):
            assert name not in page


def test_b6_form_lists_llmload_fields_in_the_option_tables_order_with_dropdowns() -> None:
    with web_ui() as ui:
        page = ui.get("/").decode()
    embedded = page.split("window.templateArgs = ", 1)[1].split("\n", 1)[0].strip().rstrip(";")
    extra = json.loads(embedded)["extra_options"]
    llmload_fields = [name for name in extra if name in {spec.dest for spec in OPTIONS}]
    assert llmload_fields == [spec.dest for spec in OPTIONS if not spec.launch_only]  # not alphabetical
    assert llmload_fields[:3] == ["model", "prompt", "dataset"]
    assert extra["dataset_format"]["choices"] == ["auto", "jsonl", "sharegpt"]
    assert extra["max_tokens"]["default_value"] == "128"
    assert "Unset: poisson" not in extra["arrival"]["help_text"]  # the default is shown under the field


def test_b8_failures_tab_has_one_row_per_error_category(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "40", "--results-json", str(results), sim_args=("--fail-rate", "0.5")) as ui:
        assert ui.swarm(max_tokens="4", max_failure_ratio="1")["success"] is True
        # the final document: the results file holds the run-start checkpoint (no failures yet) until the
        # stop's drain has ended, which on a busy machine is later than Locust's "stopped"
        stats = ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to end")
        rows = stats["errors"]
        failed = json.loads(results.read_text())["requests"]["failed"]
        assert failed > 0
        assert len(rows) == 1, rows
        assert rows[0]["occurrences"] == failed
        assert rows[0]["error"].startswith("HTTP 500"), rows[0]
        assert "(e.g. " in rows[0]["error"]


def _tab(stats: dict[str, object], key: str) -> list[dict[str, str]]:
    tabs = {entry["key"]: entry["data"] for entry in stats["extended_stats"]}  # type: ignore[attr-defined]
    rows: list[dict[str, str]] = tabs[key]
    return rows


def test_llm_tab_shows_the_summary_figures_verdict_and_downloads(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "12", "--results-json", str(results), sim_args=("--fail-rate", "0.25")) as ui:
        page = ui.get("/").decode()
        assert "extended_tabs" in page
        assert "llmload/results.json" in page
        assert ui.swarm(max_tokens="6", max_failure_ratio="1")["success"] is True
        # the final document, not the partial checkpoint written at the run's start
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to end")
        stats = ui.wait(lambda s: any(r["item"] == "Verdict" for r in _tab(s, "llmload-run")), "the verdict row", 10)
        document = json.loads(results.read_text())
        (row,) = _tab(stats, "llmload")
        assert (row["endpoint"], row["model"]) == ("chat", "llmload-sim")
        assert int(row["succeeded"]) == document["requests"]["succeeded"]
        assert int(row["failed"]) == document["requests"]["failed"]
        assert int(row["completion_tokens"]) == document["tokens"]["completion"]
        assert float(row["ttft_p99_ms"]) == round(document["latency"]["ttft_s"]["p99"] * 1000, 1)
        run = {r["item"]: r["value"] for r in _tab(stats, "llmload-run")}
        assert run["Verdict"] == document["verdict"]
        failures = [r for r in _tab(stats, "llmload-run") if r["item"].startswith("Failures: ")]
        assert [r["item"] for r in failures] == [f"Failures: {e['category']}" for e in document["errors"]]
        assert json.loads(ui.get("/llmload/results.json")) == document
        assert ui.get("/llmload/summary.txt").decode().rstrip().endswith(document["verdict"])
        report = ui.get("/llmload/report.html").decode()
        assert report.lstrip().lower().startswith("<!doctype html")
        assert document["run"]["run_id"] in report
        _clean(ui)

"""llmload's tabs in Locust's web UI, through Locust's own extension points.

- ``template_args["extended_tabs"]`` / ``["extended_tables"]``: two tabs, "LLM"
  (one row per endpoint/model with the summary's figures, live) and "LLM run"
  (state, what the statistics cover, the verdict once the run ended,
  failures by category, the ``/metrics`` URL when the exporter is on);
- ``extended_stats``: their rows, added to Locust's ``/stats/requests``
  answer (polled every 2 s by the web UI) by an ``after_request`` hook;
- ``template_args["extended_csv_files"]``: downloads in the "Download Data"
  tab: the results JSON, the console summary and the HTML report of the last run, served by
  routes on ``web_ui.app`` guarded by ``auth_required_if_enabled``.

The figures are the master's merged statistics (``RunState.totals``), the same
the summary, the results file and ``/metrics`` are built from.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import STATE_INIT, STATE_SPAWNING, STATE_STOPPED, STATE_STOPPING, MasterRunner, WorkerRunner

import json
import time
from typing import Any

from flask import Response, has_request_context, request

from llmload.edge.runtime import runtime_of
from llmload.exporters.console import summary_lines
from llmload.exporters.html import ReportError, render_report
from llmload.exporters.web_tables import (
    ENDPOINT_COLUMNS,
    RUN_COLUMNS,
    RunFacts,
    endpoint_rows,
    reachable_url,
    run_rows,
)

__all__ = ["LLM_TAB", "RUN_TAB", "install"]

LLM_TAB = "llmload"
RUN_TAB = "llmload-run"
_STATS_ENDPOINT = "locust.request_stats"


def install(environment: Environment) -> None:
    """Add the tabs, their rows and the downloads to the web UI (no-op without it or on a worker)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None or isinstance(environment.runner, WorkerRunner):
        return
    options = environment.parsed_options
    base = str(getattr(options, "web_base_path", "") or "").rstrip("/")
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": LLM_TAB}, {"title": "LLM run", "key": RUN_TAB}]
    web_ui.template_args["extended_tables"] = [
        {"key": LLM_TAB, "structure": [{"key": k, "title": t} for k, t in ENDPOINT_COLUMNS]},
        {"key": RUN_TAB, "structure": [{"key": k, "title": t} for k, t in RUN_COLUMNS]},
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llmload/results.json", "title": "llmload results JSON (last finished run)"},
        {"href": "./llmload/summary.txt", "title": "llmload summary (last finished run)"},
        {"href": "./llmload/report.html", "title": "llmload HTML report (last finished run)"},
    ]
    app = web_ui.app

    def add_rows(response: Response) -> Response:
        if request.endpoint != _STATS_ENDPOINT or response.status_code != 200 or not response.is_json:
            return response
        body = response.get_json()
        if isinstance(body, dict) and _stale(body, environment):
            body = _fresh_stats(app) or body
        if isinstance(body, dict) and _start_under_way(environment):
            body["state"] = STATE_SPAWNING
        if isinstance(body, dict):
            body["extended_stats"] = extended_stats(environment)
            response.set_data(json.dumps(body))
        return response

    app.after_request(add_rows)
    environment.events.reset_stats.add_listener(lambda **_kw: _clear_stats_cache(app))

    def results_json() -> Response:
        results = _results(environment)
        if results is None:
            return Response("no llmload run has ended yet\n", status=404, mimetype="text/plain")
        return Response(
            json.dumps(results, indent=2) + "\n",
            mimetype="application/json",
            headers={"Content-Disposition": "attachment; filename=llmload-results.json"},
        )

    def summary_txt() -> Response:
        results = _results(environment)
        if results is None:
            return Response("no llmload run has ended yet\n", status=404, mimetype="text/plain")
        return Response("\n".join(summary_lines(results)) + "\n", mimetype="text/plain")

    def report_html() -> Response:
        results = _results(environment)
        if results is None:
            return Response("no llmload run has ended yet\n", status=404, mimetype="text/plain")
        try:
            page = render_report([results])
        except ReportError as exc:
            return Response(f"llmload: {exc}\n", status=500, mimetype="text/plain")
        return Response(
            page, mimetype="text/html", headers={"Content-Disposition": "attachment; filename=llmload-report.html"}
        )

    app.add_url_rule(f"{base}/llmload/report.html", "llmload_report_html", web_ui.auth_required_if_enabled(report_html))
    app.add_url_rule(
        f"{base}/llmload/results.json", "llmload_results_json", web_ui.auth_required_if_enabled(results_json)
    )
    app.add_url_rule(f"{base}/llmload/summary.txt", "llmload_summary_txt", web_ui.auth_required_if_enabled(summary_txt))


def _results(environment: Environment) -> dict[str, Any] | None:
    runtime = runtime_of(environment)
    return None if runtime is None else runtime.run.results


def _page_host() -> str:
    """The ``Host`` the web UI was opened on ("" outside a request)."""
    return request.host if has_request_context() else ""


def _stats_cache_owner(app: Any) -> Any:
    """Locust's memoized ``/stats/requests`` view (the one with ``clear_cache``) under its auth wrapper, or None."""
    view = app.view_functions.get(_STATS_ENDPOINT)
    while view is not None and not hasattr(view, "clear_cache"):
        view = getattr(view, "__wrapped__", None)
    return view


def _clear_stats_cache(app: Any) -> None:
    """Drop Locust's cached ``/stats/requests`` answer, so the next poll is computed afresh.

    Locust memoizes the route for 2 s (``locust.web.DEFAULT_CACHE_TIME``; doubled each time one
    answer took longer) and neither Start nor RESET clears it. RESET's listeners run before Locust
    clears its table, with no wait in between, so the next answer has the cleared figures.
    """
    owner = _stats_cache_owner(app)
    if owner is not None:
        owner.clear_cache()


def _stale(body: dict[str, Any], environment: Environment) -> bool:
    """Whether a ``/stats/requests`` answer shows another runner state than the runner's now (a cached one)."""
    runner = environment.runner
    return runner is not None and body.get("state") != str(runner.state)


def _start_under_way(environment: Environment) -> bool:
    """Whether Start was pressed and the runner has not left ``ready`` (or ``stopped``) yet.

    Locust starts the run in a greenlet after answering the Start post, and the
    state turns ``spawning`` only once every ``test_start`` listener returned:
    llmload's check of the target (preflight) waits on the network meanwhile.
    A poll in that window answered ``ready``; the page then showed the start
    form again and stopped polling, so the run never showed until a reload.
    """
    runner = environment.runner
    if runner is None or runner.state not in (STATE_INIT, STATE_STOPPED):
        return False
    starts = (getattr(environment.web_ui, "_swarm_greenlet", None), getattr(runner, "spawning_greenlet", None))
    return any(g is not None and not g.dead for g in starts)


def _fresh_stats(app: Any) -> dict[str, Any] | None:
    """``/stats/requests`` computed now, past Locust's cache; None when it cannot be.

    A cached answer from before Start says ``ready`` (see ``_start_under_way``
    for what the page then does); one from before a stop says ``running``.
    """
    _clear_stats_cache(app)
    view = app.view_functions.get(_STATS_ENDPOINT)
    if view is None:
        return None
    answer = view()
    body = answer.get_json() if isinstance(answer, Response) and answer.is_json else None
    return body if isinstance(body, dict) else None


def extended_stats(environment: Environment) -> list[dict[str, Any]]:
    """The rows of both tabs, as Locust's ``extended_stats`` (one entry per tab key)."""
    runtime = runtime_of(environment)
    runner = environment.runner
    if runtime is None or runner is None:
        return []
    in_flight = runtime.run.in_flight
    if isinstance(runner, MasterRunner) and runtime.process.export is not None:
        in_flight = runtime.workers_in_flight()
    facts = RunFacts(
        state=str(runner.state),
        run_id=runtime.run.run_id,
        in_flight_requests=in_flight,
        reset_at=None
        if runtime.run.reset_at_unix is None
        else time.strftime("%H:%M:%S", time.localtime(runtime.run.reset_at_unix)),
        results=runtime.run.results,
        metrics_url=None if runtime.process.export is None else reachable_url(runtime.process.export.url, _page_host()),
        ending=bool(runtime.run.run_id)
        and runtime.run.results is None
        and runner.state in (STATE_STOPPING, STATE_STOPPED),
    )
    stats = runtime.run.totals()
    slo = runtime.process.config.slo
    return [
        {"key": LLM_TAB, "data": endpoint_rows(stats, slo)},
        {"key": RUN_TAB, "data": run_rows(stats, facts)},
    ]

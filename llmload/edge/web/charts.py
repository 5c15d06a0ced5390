"""Live charts in the LLM tab, the form's labels and the EDIT form, through one script added to Locust's page.

Locust's extended tabs (``llmload.edge.web.tab``) render tables of text only, and
its React page offers no hook for other content short of rebuilding the page
with npm. So, on ``environment.web_ui.app`` (all routes guarded by
``auth_required_if_enabled``):

- ``GET {base}/llmload/timeseries.json[?since_t=T]``: the run's per-interval
  total rows so far (``series_payload``), the rows the results' ``timeseries``
  holds. During the run only *complete* intervals are given (those the
  ``--timeseries`` file already has); the interval in progress is left out,
  so a chart never shows a half-counted interval as a dip. Once the run's
  results exist, their rows are given, the last (partial) interval included
  and marked ``partial``: the rate charts leave it out (a few requests over a
  fraction of a second is no rate) and say so. The answer also carries the
  client-saturation warnings (shown above the LLM tab's table), the run's
  start (the charts' wall-clock axis) and its ``--abort-on`` limits (drawn as lines).
- ``GET {base}/llmload/static/<file>``: ``llmtab.js`` and the vendored Chart.js,
  from the package (never a CDN).
- An ``after_request`` hook adds those two scripts and a JSON block (the form
  labels, help and defaults from ``llmload.settings.options``; the ``/metrics`` URL)
  to Locust's index page. The script draws the charts under the LLM tab's
  table (polling the route every 2 s while the tab is shown), relabels the
  form's llmload fields, and hides them in the EDIT dialog, where they cannot
  apply (``llmload.edge.web.form`` still refuses a posted change).
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import WorkerRunner

import json
from importlib import resources
from typing import Any

from flask import Response, has_request_context, request

from llmload.aggregate.series import IntervalSeries
from llmload.edge.runtime import Runtime, runtime_of
from llmload.exporters.chart_rows import client_warnings, results_warnings
from llmload.exporters.web_charts import FAILURE_COLUMNS, RowCache, form_fields, script_tags, series_payload
from llmload.exporters.web_tables import reachable_url

__all__ = ["install", "page_config"]

_STATIC_FILES = {"llmtab.js": "text/javascript", "chart.umd.min.js": "text/javascript"}
_INDEX_ENDPOINT = "locust.index"


def page_config(environment: Environment, base: str) -> dict[str, Any]:
    """What the page script needs: route base, the form fields and the ``/metrics`` URL (None when off)."""
    runtime = runtime_of(environment)
    export = runtime.process.export if runtime is not None else None
    return {
        "base": base,
        "fields": form_fields(),
        "metrics_url": None
        if export is None
        else reachable_url(export.url, request.host if has_request_context() else ""),
        "failure_columns": list(FAILURE_COLUMNS),
    }


def _warnings(runtime: Runtime) -> list[str]:
    """The client-saturation warnings of the run: its results' once it ended, else the live figures'."""
    if runtime.run.results is not None:
        return results_warnings(runtime.run.results)
    cpu_s = max(runtime.run.cpu_saturated_s, runtime.process.cpu.saturated_s if runtime.process.cpu else 0.0)
    return client_warnings(cpu_s, runtime.run.totals().total().read_lag_s)


def install(environment: Environment) -> None:
    """Add the route, the static files and the page's script (no-op without the web UI or on a worker)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None or isinstance(environment.runner, WorkerRunner):
        return
    base = str(getattr(environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    app = web_ui.app
    cache = RowCache()

    def timeseries_json() -> Response:
        runtime = runtime_of(environment)
        runner = environment.runner
        try:
            since_t = float(request.args.get("since_t", "-inf"))
        except ValueError:
            return Response("since_t must be a number of seconds, e.g. since_t=30\n", status=400, mimetype="text/plain")
        state = str(runner.state) if runner is not None else ""
        if runtime is None:
            payload = series_payload("", state, timeline=None, series=IntervalSeries.empty(), results=None)
        else:
            run = runtime.run
            payload = series_payload(
                run.run_id, state, timeline=runtime.timeline.table, series=run.series, results=run.results,
                since_t=since_t, cache=cache, warnings=_warnings(runtime) if run.run_id else (),
                started_at_unix=run.started_at_unix or None, thresholds=runtime.process.config.abort_on,
            )  # fmt: skip
        return Response(json.dumps(payload), mimetype="application/json", headers={"Cache-Control": "no-store"})

    def static_file(name: str) -> Response:
        mimetype = _STATIC_FILES.get(name)
        if mimetype is None:
            return Response("not found\n", status=404, mimetype="text/plain")
        body = resources.files("llmload.edge.web").joinpath("static", name).read_bytes()
        return Response(body, mimetype=mimetype, headers={"Cache-Control": "max-age=300"})

    def add_script(response: Response) -> Response:
        if request.endpoint != _INDEX_ENDPOINT or response.status_code != 200 or response.mimetype != "text/html":
            return response
        page = response.get_data(as_text=True)
        if "</body>" in page:
            page = page.replace("</body>", script_tags(page_config(environment, base)) + "</body>", 1)
            response.set_data(page)
        return response

    app.add_url_rule(
        f"{base}/llmload/timeseries.json", "llmload_timeseries_json", web_ui.auth_required_if_enabled(timeseries_json)
    )
    app.add_url_rule(f"{base}/llmload/static/<name>", "llmload_static", web_ui.auth_required_if_enabled(static_file))
    app.after_request(add_script)

"""The web UI's start form, checked before Locust starts anything.

Locust's ``/swarm`` view answers "Swarming started" and starts the runner in
a greenlet, so a problem found at ``test_start`` reaches the UI only as a
run that stops with no request. A Flask ``before_request`` hook on the web
UI's app runs first: it applies the posted form to a copy of the options the
way Locust's view does, builds the ``RunConfig`` and, for a new run,
prepares it (API key, tokenizer, workload, ``GET /v1/models``, preflight
probe). A problem is answered as Locust answers its own form errors
(``{"success": false, "message": ...}``, shown under the form; refused values
also as ``"llmload_fields": {dest: message}``, every one at once, which the
page's script shows under each field), and nothing
starts: no ``test_start``, no spawn message to any worker. ``test_start``
then finds the run already prepared for the same host and options.

During a run (EDIT), Locust changes users and spawn rate only. The page's
script (``llmload.edge.web.charts``) hides llmload's fields in the EDIT dialog and
does not post them; a post that still changes an llmload value (a script, a
page without the script) is refused with the names of the changed fields
instead of being ignored.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

import argparse
import contextlib
import functools
import logging
import time
from typing import Any

from flask import Response, jsonify, request

from llmload.edge.launch import prepare
from llmload.edge.runtime import runtime_of
from llmload.errors import ConfigError, InvalidOptionsError, LLMLoadError
from llmload.exporters.web_charts import field_messages
from llmload.exporters.web_tables import RESET_IN_WEB_UI, reset_note
from llmload.run.plan import users_short_of_workers
from llmload.settings.config import RunConfig
from llmload.settings.options import OPTIONS, OptionSpec

__all__ = ["install", "on_reset_stats", "posted_options"]

log = logging.getLogger("llmload")

_SWARM_ENDPOINT = "locust.swarm"


def install(environment: Environment) -> None:
    """Check every start/EDIT form post before Locust's ``/swarm`` view (no-op without the web UI)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None or isinstance(environment.runner, WorkerRunner):
        return
    guard = web_ui.auth_required_if_enabled(functools.partial(_check_swarm, environment))

    def before_request() -> Response | None:
        if request.method != "POST" or request.endpoint != _SWARM_ENDPOINT:
            return None
        return guard()  # type: ignore[no-any-return]

    web_ui.app.before_request(before_request)


def posted_options(options: argparse.Namespace, form: Any) -> argparse.Namespace:
    """A copy of ``options`` with the form's values, typed as Locust's ``/swarm`` view types them."""
    posted = argparse.Namespace(**vars(options))
    for spec in OPTIONS:
        if spec.dest not in form:
            continue
        old, value = getattr(options, spec.dest, None), form.get(spec.dest)
        if isinstance(old, bool):
            setattr(posted, spec.dest, value == "true")
        elif isinstance(old, list):
            setattr(posted, spec.dest, value.split(",") if "," in value else form.getlist(spec.dest))
        else:
            setattr(posted, spec.dest, value)
    with contextlib.suppress(ValueError):  # a bad user count: Locust's view refuses it with its own message
        posted.num_users = int(form.get("user_count", ""))
    return posted


def _check_swarm(environment: Environment) -> Response | None:
    runtime = runtime_of(environment)
    options = environment.parsed_options
    runner = environment.runner
    if runtime is None or options is None or runner is None:
        return None
    posted = posted_options(options, request.form)
    try:
        if runner.state in (STATE_RUNNING, STATE_SPAWNING):
            _refuse_changes(options, posted)
            return None
        host = str(request.form.get("host", environment.host or "")).replace("<", "").replace(">", "")
        posted.host = host  # checked with llmload's values: refused ones are reported at once
        _check_users_cover_workers(runner, posted)
        prepare(environment, runtime, options=posted, host=host)
    except LLMLoadError as exc:
        log.error("llmload: not starting: %s", exc)
        answer = {"success": False, "message": f"llmload: {exc}", "host": environment.host}
        if isinstance(exc, InvalidOptionsError):
            answer["llmload_fields"] = field_messages(exc)
        return jsonify(answer)
    return None


def _check_users_cover_workers(runner: Any, posted: argparse.Namespace) -> None:
    """Refuse a --num-requests run with fewer users than workers: a worker without users never sends its share.

    Raises:
        ConfigError: naming the numbers and the fix.
    """
    if not isinstance(runner, MasterRunner):
        return
    users = int(getattr(posted, "num_users", 0) or 0)
    problem = users_short_of_workers(users, runner.worker_count, RunConfig.from_options(posted).shared_totals)
    if problem is not None:
        raise ConfigError(problem)


def _refuse_changes(running: argparse.Namespace, posted: argparse.Namespace) -> None:
    """EDIT: refuse a post that changes an llmload value (they apply when a run starts).

    Raises:
        ConfigError: naming the changed fields and what to do.
    """
    changed = [spec for spec in OPTIONS if _value(spec, running) != _value(spec, posted)]
    if changed:
        names = ", ".join(f"{spec.flag} ({_shown(running, spec)} -> {_shown(posted, spec)})" for spec in changed)
        raise ConfigError(
            f"EDIT changes users and spawn rate only; llmload's options apply when a run starts: {names}. "
            "STOP the run, then start a NEW one with the new values"
        )


def _value(spec: OptionSpec, options: argparse.Namespace) -> object:
    try:
        return spec.value(getattr(options, spec.dest, None))
    except ConfigError as exc:
        return f"invalid: {exc}"


def _shown(options: argparse.Namespace, spec: OptionSpec) -> str:
    raw = getattr(options, spec.dest, None)
    return "unset" if raw in (None, "") else repr(raw)


def on_reset_stats(environment: Environment, *, cause: str = RESET_IN_WEB_UI, **_kw: Any) -> None:
    """RESET in the web UI (or ``--reset-stats``): llmload's statistics restart with Locust's.

    On the master or a single process.

    The summary, results, time series and ``/metrics`` then cover the requests finished
    after the reset, as Locust's tables do. Workers send deltas, so resetting
    the master's merged statistics is enough. Logs ``reset_note``.
    """
    runtime = runtime_of(environment)
    if runtime is None or isinstance(environment.runner, WorkerRunner):
        return
    runtime.run.restart_counts(time.time())
    runtime.timeline.restart()
    if runtime.process.export is not None:
        runtime.process.export.window.reset()
    log.info("%s", reset_note(cause, server_metrics=runtime.process.server_scraper is not None))

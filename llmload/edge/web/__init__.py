"""llmload in Locust's web UI: the start form's checks, RESET, the LLM tabs and their charts."""

from __future__ import annotations

from locust.env import Environment

from llmload.edge.web import charts, form, tab

__all__ = ["charts", "form", "install", "tab"]


def install(environment: Environment) -> None:
    """Check the start form and add the LLM tabs (master or single process with the web UI).

    The form lists llmload's fields in the option table's order (grouped, most
    changed first). The page embeds them with Jinja's ``tojson``, whose
    default policy sorts keys (which made the form alphabetical), so the web
    UI's templates keep insertion order.
    """
    web_ui = environment.web_ui
    if web_ui is not None and web_ui.app is not None:
        web_ui.app.jinja_env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    form.install(environment)
    tab.install(environment)
    charts.install(environment)

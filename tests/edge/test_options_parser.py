"""llmload's options on Locust's parser: CLI, env, locust.conf and the web UI's form (in process)."""

from __future__ import annotations

from locust import argument_parser as ap

from types import SimpleNamespace

import pytest

from llmload.edge import hooks
from llmload.errors import ConfigError
from llmload.settings.config import RunConfig
from llmload.settings.options import GROUPS, OPTIONS


@pytest.fixture(scope="module")
def ui() -> dict[str, dict[str, object]]:
    """The web UI's custom parameters as Locust builds them, with llmload's hooks on Locust's events."""
    hooks.install()
    ap.get_parser()
    return ap.ui_extra_args_dict(["locust", "-f", "locustfiles/chat.py", "--arrival", "GAMMA"])


def test_options_appear_in_the_web_ui_custom_parameters_and_help(ui) -> None:
    assert sorted(k for k in ui if k in ("max_tokens", "num_requests", "model", "ignore_eos")) == [
        "ignore_eos",
        "max_tokens",
        "model",
        "num_requests",
    ]
    assert {spec.group for spec in OPTIONS} == set(GROUPS)
    order = [GROUPS.index(spec.group) for spec in OPTIONS]
    assert order == sorted(order)  # table order is the web UI form's order


def test_web_ui_form_follows_the_table_order_with_dropdowns_and_llmload_messages(ui) -> None:
    order = list(ui)
    assert order == [spec.dest for spec in OPTIONS if not spec.launch_only]  # launch-only: not in the form
    assert order[:3] == ["model", "prompt", "dataset"]
    assert order.index("max_tokens") < order.index("num_requests") < order.index("seed")
    # a value outside the dropdown passes Locust's parser; RunConfig names the fix
    assert ui["arrival"]["default_value"] == "GAMMA"
    assert list(ui["arrival"]["choices"]) == ["", "poisson", "constant", "gamma"]
    assert list(ui["stream_usage"]["choices"]) == ["auto", "on", "off"]
    values = {spec.dest: spec.locust_default for spec in OPTIONS}
    with pytest.raises(ConfigError, match="--arrival must be one of poisson, constant, gamma, got 'foo'"):
        RunConfig.from_options(SimpleNamespace(**{**values, "request_rate": "5", "arrival": "foo"}))
    assert RunConfig.from_options(SimpleNamespace(**{**values, "request_rate": "5", "arrival": "GAMMA"})).arrival == (
        "gamma"
    )

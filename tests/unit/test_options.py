"""The option table: one declaration per option feeds the parser, the config, and ``llmload options``."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from llmload.config import RunConfig, Timeouts
from llmload.options import GROUPS, OPTIONS, default, describe

README = Path(__file__).resolve().parents[2] / "README.md"


def _llmload(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "llmload", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_nc12_llmload_options_lists_every_option_grouped_with_help_and_default():
    text = _llmload("options")
    assert text == describe()
    positions = [text.index(f"\n{group}:\n") for group in GROUPS]
    assert positions == sorted(positions)
    for spec in OPTIONS:
        at = text.index(f"\n  {spec.flag}")
        group_at = max(p for p in positions if p < at)
        assert text[group_at:].startswith(f"\n{spec.group}:\n"), spec.flag
        entry = text[at : text.index("default:", at)]
        assert spec.help.split()[0] in entry
        assert f"env: {spec.env}" in text[at:]
    for flag, shown in (("--max-tokens", "128"), ("--request-timeout", "1800.0"), ("--prometheus-port", "9646")):
        at = text.index(f"\n  {flag} ")
        assert f"default: {shown};" in text[at : text.index("\n  --", at + 1)]
    for needle in ("--max-tokens", "--num-requests", "--results-json", "--request-rate", "--tokenizer"):
        assert needle in text


def test_nc12_llmload_help_and_readme_usage_point_to_llmload_options():
    assert "llmload options" in _llmload("--help")
    usage = README.read_text().split("## Usage", 1)[1][:1500]
    assert "llmload options" in usage


def test_options_defaults_are_the_config_defaults():
    as_locust_gives_them = SimpleNamespace(**{spec.dest: spec.locust_default for spec in OPTIONS})
    config, from_table = RunConfig(), RunConfig.from_options(as_locust_gives_them)
    assert config == from_table
    assert config.timeouts == Timeouts(default("--connect-timeout"), default("--read-timeout"), 1800.0)
    assert (config.prometheus_port, config.prometheus_grace_s, config.max_failure_ratio) == (9646, 60.0, 0.01)


def test_options_declare_each_flag_once_in_a_known_group():
    flags = [spec.flag for spec in OPTIONS]
    assert len(flags) == len(set(flags))
    assert {spec.group for spec in OPTIONS} == set(GROUPS)
    order = [GROUPS.index(spec.group) for spec in OPTIONS]
    assert order == sorted(order)  # table order is the web UI form's order

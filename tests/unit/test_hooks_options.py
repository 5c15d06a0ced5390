"""llmload's options are registered on Locust's parser: CLI, env, locust.conf and the web UI."""

import subprocess
import sys

from tests.integration.test_sim import REPO_ROOT


def test_options_appear_in_the_web_ui_custom_parameters_and_help():
    code = (
        "from locust import argument_parser as ap\n"
        "from llmload.edge import hooks\n"
        "hooks.install()\n"
        "parser = ap.get_parser()\n"
        "ui = ap.ui_extra_args_dict(['locust', '-f', 'locustfiles/chat.py'])\n"
        "print(sorted(k for k in ui if k in ('max_tokens', 'num_requests', 'model', 'ignore_eos')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['ignore_eos', 'max_tokens', 'model', 'num_requests']"

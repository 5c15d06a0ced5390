"""The public surface: sorted, complete, and free of import-time side effects."""

import subprocess
import sys

import llmload


def test_public_api_all_is_sorted_and_resolvable():
    assert llmload.__all__ == sorted(llmload.__all__)
    # ChatUser/CompletionUser import Locust, which monkey-patches; checked in a subprocess below.
    for name in set(llmload.__all__) - set(llmload._LAZY):
        assert getattr(llmload, name).__module__.startswith("llmload."), name


def test_public_api_import_does_not_import_locust_or_gevent():
    code = "import sys, llmload; print('locust' in sys.modules, 'gevent' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "False"]


def test_public_api_exposes_locust_users_lazily():
    code = (
        "import llmload; print(llmload.ChatUser.__name__, llmload.CompletionUser.endpoint, "
        "llmload.ResponsesUser.endpoint, llmload.MessagesUser.endpoint, llmload.EmbeddingsUser.endpoint)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["ChatUser", "completions", "responses", "messages", "embeddings"]

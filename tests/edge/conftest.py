"""Edge tests: llmload's Locust listeners and master/worker protocol driven in one process (``cluster.py``).

Importing Locust monkey-patches the standard library (gevent), which the other tests must never
see, so the edge tests run in a pytest process of their own: ``pytest tests/edge`` (a pass of
``make test``); a run of the whole tree skips them (``tests/conftest.py``). The patch is applied
here, first, as ``locust`` would at import.
"""

from __future__ import annotations

import warnings

from gevent import monkey

with warnings.catch_warnings():
    # pytest's plugins imported ssl before any test module could patch it; the edge tests use no TLS.
    warnings.simplefilter("ignore", monkey.MonkeyPatchWarning)
    monkey.patch_all()
    import locust  # noqa: F401 -- patches (already done) and sets up its logging once, as `locust` does

from collections.abc import Iterator

import pytest

from tests.simserver import InProcessSim, serve


@pytest.fixture
def sim() -> Iterator[InProcessSim]:
    """The simulator in this process: 5 ms decode steps, 40-token replies on average."""
    with serve("--decode-step-ms", "5", "--output-len-mean", "40") as server:
        yield server

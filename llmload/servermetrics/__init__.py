"""Inference-server metrics: read a ``/metrics`` text, map known servers onto one vocabulary, sum up a run.

Pure: text in, values out (the scraping greenlet is ``llmload.net.scrape``).
``parse_snapshot`` parses with ``prometheus_client``'s parser, detects the server
kind and reads the common quantities below; ``ServerRun`` turns the snapshots of
one endpoint over a run into counter deltas (reset-safe), gauge mean/max and
histogram deltas; ``summarise`` and ``cross_check`` make the results' ``server``
section. Raw names stay available (``ServerSnapshot.raw``, ``.names``).

The common vocabulary (gauges, counters, histograms) is listed in ``names``.

Modules: ``names`` (the mapping table and where each name comes from),
``snapshot`` (``parse_snapshot``: one scrape), ``run`` (``ServerRun``,
``summarise``, ``cross_check``), ``intervals`` (``ServerIntervals``: the
time series' server columns); the results section and the summary block are
built by ``llmload.exporters.results`` and ``.console``).
"""

from llmload.servermetrics.intervals import SERVER_COLUMNS, Reading, ServerIntervals
from llmload.servermetrics.names import GAUGES, HISTOGRAMS, NAMES, ServerKind
from llmload.servermetrics.run import Endpoint, ServerRun, cross_check, summarise
from llmload.servermetrics.snapshot import BucketCounts, ServerSnapshot, parse_snapshot

__all__ = [
    "GAUGES",
    "HISTOGRAMS",
    "NAMES",
    "SERVER_COLUMNS",
    "BucketCounts",
    "Endpoint",
    "Reading",
    "ServerIntervals",
    "ServerKind",
    "ServerRun",
    "ServerSnapshot",
    "cross_check",
    "parse_snapshot",
    "summarise",
]

"""Outputs, one module each; every output reads one of two plain values, never the statistics directly.

End of run: ``results.build_results`` turns one ``RunOutcome`` into the
results document (``sections`` and ``load`` compute its parts, ``results``
decides the run-level keys and the verdict). Outputs of a finished run read
that document only: ``console`` (the summary text), ``results.write_results_json``
(the file), ``html`` (the self-contained HTML report, also of a file read back,
and the comparison of two).

Live: ``window.RunView`` is what the master knows at one instant (merged
statistics, the live window, runner gauges). Live outputs read it only:
``prometheus`` (the collector), served by ``prometheus_server``.

Per interval: ``timeseries`` (the row schema, rows from the run's
``IntervalSeries``), ``timeline`` (the live ``Timeline``: which intervals are
complete), ``progress`` (the line logged per interval) and
``timeseries_files`` (``--timeseries`` JSONL as the run goes; the ``--csv``
files, from the results document).

Per request: ``requests_log`` (JSONL of request records).
"""

"""``--html-report`` refused before load when its path cannot be written: a locust command line run here."""

from __future__ import annotations

from tests.edge.cluster import run_locustfile_here as run_locust


def test_unwritable_html_report_path_is_refused_before_load(tmp_path):
    out = run_locust(
        [
            *("-f", "locustfiles/chat.py", "--headless", "-H", "http://127.0.0.1:9", "-u", "1"),
            *("--num-requests", "1", "--html-report", str(tmp_path)),
        ],
        timeout_s=60,
    )
    assert out.returncode == 2
    assert (
        f"--html-report {str(tmp_path)!r} is a directory; pass a file path such as {tmp_path}/report.html" in out.stderr
    )

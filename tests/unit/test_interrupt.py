"""interrupt.Interrupter: Ctrl-C becomes one KeyboardInterrupt in the main greenlet."""

import subprocess
import sys

from llmload.edge.interrupt import Interrupter


class Recorder:
    def __init__(self):
        self.delivered = []

    def __call__(self, target, exception):
        self.delivered.append((target, exception))


def test_p1_interrupter_delivers_one_keyboard_interrupt_to_main():
    deliver = Recorder()
    interrupter = Interrupter("main", deliver=deliver)
    interrupter.on_signal()
    interrupter.on_signal()  # a second Ctrl-C while the first one stops the run
    assert deliver.delivered == [("main", KeyboardInterrupt)]


def test_p1_interrupter_ignores_ctrl_c_while_a_stop_is_under_way():
    deliver = Recorder()
    Interrupter("main", stopping=lambda: True, deliver=deliver).on_signal()
    assert deliver.delivered == []


def test_a_ctrl_c_during_a_stop_is_kept_and_delivered_once_the_stop_is_complete():
    """Found by the new-user check: a Ctrl-C in the web UI while the run stopped was dropped; the process ran on."""
    deliver = Recorder()
    stopping = [True]
    interrupter = Interrupter("main", stopping=lambda: stopping[0], deliver=deliver)
    interrupter.on_signal()
    interrupter.on_signal()  # a repeat during the same stop is the same request
    assert deliver.delivered == []
    stopping[0] = False
    interrupter.stopped()
    assert deliver.delivered == [("main", KeyboardInterrupt)]
    interrupter.stopped()  # nothing kept any more
    assert deliver.delivered == [("main", KeyboardInterrupt)]


def test_a_stop_without_a_ctrl_c_during_it_delivers_nothing():
    deliver = Recorder()
    interrupter = Interrupter("main", stopping=lambda: False, deliver=deliver)
    interrupter.stopped()
    assert deliver.delivered == []


def test_interrupter_sigterm_before_load_is_named_and_forwarded_like_ctrl_c():
    """Issue 24: SIGTERM during preflight killed the process (Locust's handler comes after init)."""
    deliver = Recorder()
    interrupter = Interrupter("main", deliver=deliver)
    interrupter.on_sigterm()
    assert interrupter.signal_name == "SIGTERM"
    assert deliver.delivered == [("main", KeyboardInterrupt)]


def test_interrupter_before_load_takes_the_signal_until_the_load_starts():
    """Issue 24: a master waiting for its workers ends itself; from the load's start Locust stops the run."""
    deliver = Recorder()
    taken = []
    interrupter = Interrupter("main", deliver=deliver)
    interrupter.before_load = lambda name: taken.append(name) or True
    interrupter.on_signal()
    interrupter.on_sigterm()  # a repeat changes nothing
    assert taken == ["Ctrl-C"]
    assert deliver.delivered == []
    later = Interrupter("main", deliver=deliver)
    later.before_load = lambda name: taken.append(name) or True
    later.load_started()
    later.on_signal()
    assert taken == ["Ctrl-C"]
    assert deliver.delivered == [("main", KeyboardInterrupt)]
    later.exit(2)
    assert isinstance(deliver.delivered[-1][1], SystemExit)
    assert deliver.delivered[-1][1].code == 2


def test_p1_interrupter_forward_is_idempotent():
    deliver = Recorder()
    interrupter = Interrupter("main", deliver=deliver)
    interrupter.forward()
    interrupter.forward()
    assert len(deliver.delivered) == 1


_REAL_SIGNAL = """
import os, signal, gevent
from llmload.edge.interrupt import Interrupter
main = gevent.getcurrent()
interrupter = Interrupter(main)
interrupter.install()
busy = [gevent.spawn(gevent.sleep, 5) for _ in range(50)]  # user greenlets waiting in the loop
try:
    os.kill(os.getpid(), signal.SIGINT)
    gevent.joinall(busy)
    print("not interrupted")
except KeyboardInterrupt:
    print("main interrupted;", sum(g.dead for g in busy), "greenlets died")
"""


def test_p1_interrupter_turns_a_real_sigint_into_an_interrupt_of_main_only():
    proc = subprocess.run([sys.executable, "-c", _REAL_SIGNAL], capture_output=True, text=True, timeout=30, check=False)
    assert proc.stdout.strip() == "main interrupted; 0 greenlets died", proc.stderr
    assert "Traceback" not in proc.stderr

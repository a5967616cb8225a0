"""SIGTERM and SIGINT from the first instant of ``python -m monitor``: a stop request, never a kill.

Kubernetes may stop a pod at any moment, start-up included. A second signal exits at once (a user pressing Ctrl-C
twice). Until the daemon is built (imports, store, rubrics)
the signal only sets ``STOP``; the daemon then exits 0 before its first cycle. Commands other than ``run`` get
the default handlers back (``release``), with a signal that arrived meanwhile delivered again.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

STOP = threading.Event()
"""Set by SIGTERM or SIGINT once ``install`` ran."""
_received: list[int] = []


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if STOP.is_set():
        # A second signal (Ctrl-C again): the user will not wait. Nothing is lost: a verdict is recorded in one
        # transaction and a conversation is marked scored only after it, so the evaluation in flight stays
        # pending and is judged on the next start.
        os.write(2, b"rubric-monitor: signal received again: exiting now; the evaluation in flight stays pending "
                    b"for the next start\n")
        os._exit(128 + signum)
    _received.append(signum)
    STOP.set()


def install() -> None:
    """Take SIGTERM and SIGINT as stop requests (main thread only, as Python requires)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)


def release() -> None:
    """Default handlers again; a signal received while installed is delivered again to take its usual effect."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if _received:
        os.kill(os.getpid(), _received[0])

"""The ``spark-pg`` console script: :func:`spark_pg.cli.main` with Ctrl-C caught from the first import on.

``main()`` catches Ctrl-C while a command runs; one pressed while the CLI's modules are still loading
(psycopg, argparse, the command's own imports) reached the interpreter as a traceback. Here it is the same
one line and exit status 130 wherever it lands.

:func:`stop_signals_interrupt` gives SIGTERM and SIGHUP the same path as Ctrl-C, for a command that must
clean up what it started (`spark-pg faults`): by default they end the process at once, and no ``finally``
runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does, so the block's ``with``
    and ``finally`` cleanup runs and the CLI exits 130. Only the first one raises: any later one is ignored
    while that cleanup runs (SIGKILL still ends the process). The previous handlers are restored when the
    block ends. A signal ignored already (``nohup`` ignores SIGHUP) stays ignored. Outside the main thread
    (where Python runs signal handlers) nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():  # None: a handler not set from Python, taken as the default
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def run() -> None:
    """Run the CLI on ``sys.argv`` and exit with its status."""
    try:
        from spark_pg.cli import main

        status = main()
    except KeyboardInterrupt:
        print("spark-pg: interrupted", file=sys.stderr)
        status = INTERRUPTED
    sys.exit(status)

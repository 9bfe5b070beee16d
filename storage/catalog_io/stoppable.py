"""A user's query that Ctrl-C or a time limit stops at once.

DuckDB runs a query in C++ with Python's GIL released, and Python runs its SIGINT handler only between bytecodes of
the main thread: a long query ignored Ctrl-C. Here the C-level signal handler's byte on ``signal.set_wakeup_fd``
wakes a watcher thread, which calls ``DuckDBPyConnection.interrupt()``; the query fails with DuckDB's
``InterruptException``, which leaves the block as ``KeyboardInterrupt`` (the CLI: one line, exit 130; the shell:
back to its prompt). The same watcher interrupts the query at its time limit: ``QueryTimeout`` (exit 1).
Signals reach the watcher only while the block runs in the main thread; elsewhere only the time limit applies.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import duckdb

from conf.errors import AugdagError, ConfError

TIMEOUT_ENV = "AUGDAG_QUERY_TIMEOUT"  # seconds: the time limit of a user's query (`sql --timeout` sets it per call)


class QueryTimeout(AugdagError):
    """A user's query ran past its time limit and was stopped (exit 1: the query did not finish)."""


def env_timeout(environ: Mapping[str, str] = os.environ) -> float | None:
    """The time limit ``$AUGDAG_QUERY_TIMEOUT`` sets (seconds > 0), None when unset or empty.

    Raises:
        ConfError: a value that is not a number of seconds > 0.
    """
    raw = environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfError(f"${TIMEOUT_ENV}: expected a number of seconds > 0, got {raw!r}")
    return seconds


class _Watcher(threading.Thread):
    """Interrupts ``con`` when a SIGINT byte arrives on ``signals`` or ``timeout_s`` passes; ends on ``stop``."""

    def __init__(self, con: duckdb.DuckDBPyConnection, signals: int | None, timeout_s: float | None) -> None:
        super().__init__(name="augdag-query-watcher", daemon=True)
        self.con, self.signals, self.timeout_s = con, signals, timeout_s
        self.stop_r, self.stop_w = os.pipe()
        self.forward = -1  # the wakeup descriptor that was set before ours: its bytes are passed on
        self.why: str | None = None  # "interrupt" or "timeout" once it stopped the query

    def run(self) -> None:
        """Wait for a signal byte, the time limit or the end of the block, whichever comes first."""
        watched = [self.stop_r] + ([self.signals] if self.signals is not None else [])
        while True:
            ready, _, _ = select.select(watched, [], [], self.timeout_s)
            if not ready:
                self.halt("timeout")
                return
            if self.signals in ready:  # before the end: the block may end because of this very signal
                data = os.read(self.signals, 64)
                if self.forward >= 0:
                    with contextlib.suppress(OSError):
                        os.write(self.forward, data)
                if signal.SIGINT in data:
                    self.halt("interrupt")
                    return
            if self.stop_r in ready:
                return

    def halt(self, why: str) -> None:
        """Stop the running query and say ``why`` ("interrupt" or "timeout")."""
        self.why = why
        self.con.interrupt()

    def close(self) -> None:
        """End the watch (once its signal bytes are read) and wait for it; again, nothing."""
        if self.stop_w < 0:
            return
        os.write(self.stop_w, b"x")
        self.join()
        os.close(self.stop_r)
        os.close(self.stop_w)
        self.stop_w = -1


@contextmanager
def stoppable(con: duckdb.DuckDBPyConnection, *, timeout_s: float | None = None) -> Iterator[None]:
    """Run the block's queries on ``con`` so that Ctrl-C and ``timeout_s`` (None: no limit) stop them.

    Raises:
        KeyboardInterrupt: Ctrl-C (SIGINT) stopped a query.
        QueryTimeout: a query ran past ``timeout_s``.
    """
    in_main = threading.current_thread() is threading.main_thread()
    signals = os.pipe() if in_main else None
    watcher = _Watcher(con, signals[0] if signals else None, timeout_s)
    if signals is not None:
        os.set_blocking(signals[1], False)
        watcher.forward = signal.set_wakeup_fd(signals[1], warn_on_full_buffer=False)
    watcher.start()
    try:
        yield
    except BaseException as e:
        # the C-level handler wrote the SIGINT byte before Python's handler ran: DuckDB may have seen the pending
        # signal itself ("Query interrupted") before the watcher read the byte, so it is read now
        watcher.close()
        if watcher.why == "timeout" and not isinstance(e, KeyboardInterrupt):
            raise QueryTimeout(f"query stopped at its time limit of {timeout_s:g} s (--timeout, ${TIMEOUT_ENV})") from None
        if watcher.why == "interrupt" or isinstance(e, duckdb.InterruptException):
            raise KeyboardInterrupt from None  # whatever error the interrupted query raised on its way out
        raise
    finally:
        watcher.close()  # before the connection closes: never an interrupt() on a closed connection
        if signals is not None:
            signal.set_wakeup_fd(watcher.forward, warn_on_full_buffer=False)
            os.close(signals[0])
            os.close(signals[1])

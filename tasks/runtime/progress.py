"""Progress of long stages: shards done out of shards known, and sentences done within a model's shard,
reported to whoever listens; and the process-wide stop that an interrupted run asks for.

The CLI listens with a rich progress bar; tests and the nightly flow need not listen at all. A
reporter is process-wide (shard tasks run in threads of the flow's process by default); tasks in
other processes (the processes and Dask runners) report nothing, and the flow driver still reports
each shard as its future completes.

A stage that calls a model over a shard's sentences (translation) counts them with ``sentences``: the
bar ``<stage>[<dataset>] sentences`` (one per shard when there are several) moves after every batch, so
a shard that takes minutes shows where it is, not ``0/1``. The same callback is where such a stage stops:
when the run's driver is interrupted (SIGINT, SIGTERM) it calls ``request_stop``, and every shard still
running raises ``Interrupted`` after its current batch instead of running to its end, so that the process
exits within a batch's time with the run recorded as interrupted.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from conf.errors import AugdagError

Reporter = Callable[[str, int, int | None], None]  # (label, shards done, shards in all or None if unknown)
_reporter: Reporter | None = None
_shard: ContextVar[str | None] = ContextVar("augdag_shard_label", default=None)
_stop = threading.Event()


class Interrupted(AugdagError):
    """The run was interrupted (SIGINT, SIGTERM): what was committed is kept, ``augdag retry`` resumes it."""

    exit_code = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def interruption(e: BaseException) -> Interrupted:
    """The ``Interrupted`` error that stands for ``e``: a KeyboardInterrupt (SIGINT) or Prefect's TerminationSignal
    (SIGTERM, its ``signal``), named by its signal."""
    number = getattr(e, "signal", signal.SIGINT if isinstance(e, KeyboardInterrupt) else None)
    name = signal.Signals(number).name if number is not None else type(e).__name__
    return Interrupted(f"interrupted by {name}; the shards it finished are kept")


def report(label: str, done: int, total: int | None) -> None:
    """Tell the current reporter, if any, that ``done`` of ``total`` shards of ``label`` are done."""
    if _reporter is not None:
        _reporter(label, done, total)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """``reporter`` receives every ``report`` inside the block (process-wide); the previous one is restored after it."""
    global _reporter
    previous, _reporter = _reporter, reporter
    try:
        yield
    finally:
        _reporter = previous


@contextmanager
def in_shard(label: str) -> Iterator[None]:
    """Inside the block (one shard's stage function, in its thread), ``sentences`` reports under ``label``."""
    token = _shard.set(label)
    try:
        yield
    finally:
        _shard.reset(token)


def sentences(total: int) -> Callable[[int], None]:
    """A ``progress(done)`` callback for a model call over ``total`` sentences of the current shard: it reports
    ``<shard label> sentences`` (nothing outside a shard) and raises ``Interrupted`` once a stop was requested."""
    label = _shard.get()
    what = f"{label} sentences" if label is not None else None
    if what is not None:
        report(what, 0, total)

    def progress(done: int) -> None:
        check_stop()
        if what is not None:
            report(what, done, total)

    return progress


def request_stop() -> None:
    """Ask every running shard of this process to stop at its next batch (the driver, on SIGINT or SIGTERM)."""
    _stop.set()


def stop_requested() -> bool:
    """Whether a stop was requested in this process (an interrupted process is about to exit)."""
    return _stop.is_set()


def check_stop() -> None:
    """Raise ``Interrupted`` if a stop was requested."""
    if _stop.is_set():
        raise Interrupted("stopped: the run was interrupted (its committed shards are kept)")


def clear_stop() -> None:
    """Forget a requested stop (a process that goes on after an interrupted run: the tests)."""
    _stop.clear()

"""Progress of long stages: shards done out of shards known, reported to whoever listens.

The CLI listens with a rich progress bar; tests and the nightly flow need not listen at all. A
reporter is process-wide (shard tasks run in threads of the flow's process by default); tasks in
other processes (the processes and Dask runners) report nothing, and the flow driver still reports
each shard as its future completes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Reporter = Callable[[str, int, int | None], None]  # (label, shards done, shards in all or None if unknown)
_reporter: Reporter | None = None


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

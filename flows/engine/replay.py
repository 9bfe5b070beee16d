"""A run whose every stage is cached costs seconds: its flow is replayed in this process, without Prefect.

A fully cached run computes nothing, yet starting Prefect's temporary server costs 10–24 s (measured on 2 cores), ten
times the run itself. ``replay(fn, cache)`` calls the flow's body (``Flow.fn``) in *cached-only* mode: every
``run_stage``, ``run_source_stage`` and ``run_model_stage`` (flows/engine/driver.py) that finds its manifest (or its
model file) records it as cached exactly as a Prefect run does, so the run is in the catalog, `augdag runs`,
its log and its reports as any other; the first stage that would compute raises ``NotCached`` instead. Then
every run the replay started is discarded from the catalog (its rows in ``runs``, ``stage_runs`` and
``evaluations``, its log file and its reports) and the caller runs the flow on Prefect as usual, which finds the same
cached stages again and computes the rest. Only the CLI's `augdag run` and `augdag nightly` replay; a served,
scheduled or retried run is a Prefect flow run from the start (the UI shows it).

Outside a Prefect flow run nothing is published to Prefect (``in_flow_run``), and records (and the flows' prints,
as ``log_prints`` sends them in a flow run) go to the ``augdag`` logger (``run_logger``), which the run's log file
receives as it receives Prefect's.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import dataclasses
import logging
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from flows.engine.run_log import log_path
from storage.catalog import Catalog

T = TypeVar("T")


class NotCached(Exception):
    """A stage of a replayed run would compute: the run goes to Prefect instead."""


@dataclasses.dataclass
class Replay:
    """The runs a replay started (each pipeline's and the nightly's), to discard if it falls back, and the
    catalog they all record in: in ``deferred`` mode, so that the replay's every run and registration is one
    write at its end (a catalog connection is ~40 ms; a cached nightly made ~30 of them)."""

    catalog: Catalog
    runs: list[str] = dataclasses.field(default_factory=list)


def replay_catalog() -> Catalog | None:
    """The catalog every run of the current replay records in (see ``Replay``), or None outside a replay."""
    return replaying.catalog if (replaying := REPLAY.get()) is not None else None


REPLAY: contextvars.ContextVar[Replay | None] = contextvars.ContextVar("augdag_replay", default=None)


def check_cached(what: str) -> None:
    """Raise ``NotCached`` when this is a replay: ``what`` (a stage, a model) would be computed."""
    if REPLAY.get() is not None:
        raise NotCached(what)


def started(run_id: str) -> bool:
    """A run started (flows/engine/driver.py ``Run.start``): remembered when this is a replay (returns whether)."""
    if (replaying := REPLAY.get()) is None:
        return False
    replaying.runs.append(run_id)
    return True


def replay(fn: Callable[[], T], cache: Path) -> T | None:
    """``fn()`` in cached-only mode: its result when every stage it runs is cached, else None once the runs it
    started are discarded (the caller then runs the flow on Prefect)."""
    replaying, context = Replay(Catalog(cache)), contextvars.copy_context()  # what the replay sets stays in it
    replaying.catalog.deferred = []
    context.run(REPLAY.set, replaying)
    try:
        with prints_logged():
            result = context.run(fn)
        replaying.catalog.flush()
        return result
    except NotCached as e:
        logging.getLogger("augdag").debug("not fully cached (%s is not): running on Prefect", e)
        replaying.catalog.deferred = None  # nothing of it is written (a query may have flushed some: discarded)
        if replaying.runs:
            Catalog(cache).discard_runs(replaying.runs)
            for run_id in replaying.runs:
                log_path(cache, run_id).unlink(missing_ok=True)
                shutil.rmtree(Path(cache).absolute() / "reports" / run_id, ignore_errors=True)
        return None
    except Exception:  # a real failure (an object store that is down, ...): its runs are recorded failed, as on Prefect
        with contextlib.suppress(Exception):  # a full disk fails this too; the error that ended the run is the one
            replaying.catalog.flush()
        raise


_print = builtins.print


def print_as_log(*args: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False) -> None:
    """``print`` during a replay: to the ``augdag.run`` logger (a print to another file goes there). A module-level
    function, as Prefect's own: libraries that look ``print`` up by its module and name (numba, at import) find it."""
    if file not in (None, sys.stdout):
        _print(*args, sep=sep, end=end, file=file, flush=flush)
    else:
        logging.getLogger("augdag.run").info((sep if sep is not None else " ").join(map(str, args)))


@contextlib.contextmanager
def prints_logged() -> Iterator[None]:
    """What the flows ``print`` goes to the run's log, as Prefect's ``log_prints=True`` sends it in a flow run."""
    builtins.print = print_as_log
    try:
        yield
    finally:
        builtins.print = _print


def flow_run_context() -> Any:
    """Prefect's ``FlowRunContext`` of the flow run this code runs in, or None (a replay, a test calling a flow's
    body). A process that has not imported Prefect runs no flow: a replay does not import it for the answer."""
    if "prefect.context" not in sys.modules:
        return None
    from prefect.context import FlowRunContext

    return FlowRunContext.get()


def in_flow_run() -> bool:
    """Whether this code runs inside a Prefect flow run (else: a replay, a test calling a flow's body)."""
    return flow_run_context() is not None


def run_logger() -> Any:
    """Prefect's run logger inside a flow or task run, else the ``augdag`` logger (a replayed run)."""
    if "prefect.context" not in sys.modules:  # no run context without Prefect: not imported for the answer
        return logging.getLogger("augdag.run")
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("augdag.run")

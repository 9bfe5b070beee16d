"""The registry of pipelines: every place that lists pipelines reads it.

A ``Pipeline`` is declared once: its name, its flow (``"module:function"``, imported only when it runs:
each flow pulls in its own model stack), the pipelines whose outputs it reads (the nightly runs it
after them), the catalog views its stages fill with their documentation, the lines its run summary
adds under the stage table, its one-line ``headline`` (what it made, and the one number that matters for it), a
training pipeline's ``effects`` (each arm against its baseline: what the verdict table of a night shows), and the
profile check it needs when enabled. From it come the names a profile's ``pipelines:`` accepts
(``conf.pipelines``), the CLI's choices, the nightly's order and dependencies, the summary printing and `augdag
views`. A nightly tells whoever listens (``listening``) each pipeline's summary as it finishes (``finished``).

The built-in pipelines are registered by flows/pipelines/__init__.py. Others (a plug-in, a test) register at
run time with ``register``, or name their modules in ``AUGDAG_PIPELINES`` (comma-separated module
names, imported by ``load``), which is how a pipeline outside this repository joins the CLI.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from conf import pipelines as conf_pipelines
from conf.errors import ConfError
from storage.sql_guard import tables_read
from storage.views.docs import Doc

PLUGINS_ENV = "AUGDAG_PIPELINES"

SummaryLines = Callable[[Mapping[str, Any]], list[str]]


@dataclasses.dataclass(frozen=True)
class Headline:
    """A finished run in one line: ``made``, what it made (``27 pairs rejuvenated``), and ``number``, the one
    number that matters for it (``identification BLEU 31.20 on its training pairs``)."""

    made: str
    number: str


@dataclasses.dataclass(frozen=True)
class Effect:
    """One arm of a training pipeline against its baseline arm, as a night's verdict table shows it.

    Attributes:
        model: The downstream model and arm, ``train_nmt rejuvenated vs bitext``.
        reads: The catalog views whose rows the arm adds to what its baseline trains on (their makers are the
            augmentations it measures).
        effect: The difference with its p, in flows/reports/verdicts.py's wording: ``+0.4 BLEU (p = 0.001)``.
        caveat: What limits the reading: seeds and what a p resamples, a baseline under its floor or at chance.
        seeds: Seeds per arm.
        testset: The test set it was measured on ("" where the pipeline has one).
    """

    model: str
    reads: frozenset[str]
    effect: str
    caveat: str
    seeds: int
    testset: str = ""


Headlines = Callable[[Mapping[str, Any]], Headline]
Effects = Callable[[Mapping[str, Any]], list[Effect]]


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """One pipeline: see the module docstring."""

    name: str
    flow: str  # "module:function", a Prefect flow (conf: AugdagConf, profile: str, config: dict) -> summary
    reads: tuple[str, ...] = ()  # pipelines whose outputs it reads: it runs after them, skipped if one failed
    views: Mapping[str, Doc] = dataclasses.field(default_factory=dict)  # catalog views its stages fill
    summary: SummaryLines | str | None = None  # the lines its summary adds under the stage table (or "module:function")
    headline: Headlines | str | None = None  # its run in one line (or "module:function")
    effects: Effects | str | None = None  # a training pipeline: each arm against its baseline (or "module:function")
    check: Callable[[Any], object] | None = None  # AugdagConf -> raises ValueError when the profile cannot run it
    description: str = ""
    queries: Callable[[Any], list[str]] | None = None  # AugdagConf -> its configured SQL: it runs after what fills them
    forks: bool = False  # trains models in forks of the warm process (models/nmt/fairseq_zygote.py): started ahead

    def load_flow(self) -> Any:
        """Import the flow's module and return the flow that ``flow`` names."""
        module, _, attr = self.flow.partition(":")
        return getattr(importlib.import_module(module), attr)


REGISTRY: dict[str, Pipeline] = {}


def register(pipeline: Pipeline) -> Pipeline:
    """Add (or replace) a pipeline; its dependencies must be registered first (the nightly order follows)."""
    missing = [r for r in pipeline.reads if r not in REGISTRY and r != pipeline.name]
    if missing or pipeline.name in pipeline.reads:
        raise ConfError(
            f"pipeline {pipeline.name!r}: reads {', '.join(pipeline.reads)}; "
            f"{'itself' if not missing else 'unregistered ' + ', '.join(missing)}"
        )
    REGISTRY[pipeline.name] = pipeline
    conf_pipelines.declare(pipeline.name, pipeline.check)
    return pipeline


def unregister(name: str) -> None:
    """Remove pipeline ``name`` and its profile check (nothing when it is not registered)."""
    REGISTRY.pop(name, None)
    conf_pipelines.retract(name)


def load() -> dict[str, Pipeline]:
    """The registry with the built-in pipelines and those of the modules named in ``AUGDAG_PIPELINES``."""
    importlib.import_module("flows.pipelines")
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfError(f"{PLUGINS_ENV}: cannot import pipeline module {module!r}: {e}") from None
    return REGISTRY


def names() -> tuple[str, ...]:
    """Registered pipeline names, in registration order (dependencies first)."""
    return tuple(load())


def get(name: str) -> Pipeline:
    """The registered pipeline ``name``; an unknown name is a ``ConfError`` that lists the known ones."""
    registry = load()
    if name not in registry:
        raise ConfError(f"unknown pipeline {name!r}: expected one of {', '.join(registry)}")
    return registry[name]


def depends(enabled: Iterable[str], conf: Any = None) -> dict[str, list[str]]:
    """For each enabled pipeline, the enabled pipelines it reads (it runs after them): its entry's ``reads`` and,
    with the profile ``conf``, every pipeline that fills a view its configured SQL reads (``queries``, parsed by
    DuckDB: storage/sql_guard.py ``tables_read``), `ingest` for the dataset views. A cycle (a pipeline's SQL reading
    a view of one that reads it) is a ``ConfError`` naming both."""
    enabled = list(dict.fromkeys(enabled))
    deps = {p: [d for d in get(p).reads if d in enabled] for p in enabled}
    if conf is None:
        return deps
    makers = {view: name for name in enabled for view in get(name).views}
    for p in enabled:
        queries = get(p).queries
        for view in sorted({v for sql in (queries(conf) if queries else []) for v in tables_read(sql)}):
            maker = makers.get(view)
            if maker is not None and maker != p and maker not in deps[p]:
                if p in upstream(maker, deps):
                    raise ConfError(f"pipelines: {p}'s SQL reads `{view}`, which {maker} makes, and {maker} runs after {p}")
                deps[p].append(maker)
    return deps


def upstream(name: str, deps: Mapping[str, list[str]]) -> set[str]:
    """Every pipeline ``name`` waits for, directly or not."""
    seen: set[str] = set()
    todo = list(deps.get(name, []))
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo += deps.get(d, [])
    return seen


def view_docs() -> dict[str, Doc]:
    """Every registered pipeline's views with their documentation."""
    return {view: doc for p in load().values() for view, doc in p.views.items()}


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """What a pipeline run's summary adds under its stage table (its entry's ``summary``); nothing for a run that
    did not complete (its pipeline's results never reached the summary: the error line says what happened)."""
    pipeline = load().get(summary.get("pipeline", ""))
    if not (pipeline and pipeline.summary) or summary.get("status") != "completed":
        return []
    return _resolved(pipeline.summary)(summary)  # "module:function", beside the flow: imported when printed


def _resolved(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    """A function, or the one a "module:function" string names (imported when first needed)."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def headline(summary: Mapping[str, Any]) -> Headline | None:
    """A completed run's one line (its entry's ``headline``); None for a pipeline without one or a run that did not
    complete."""
    pipeline = load().get(summary.get("pipeline", ""))
    if not (pipeline and pipeline.headline) or summary.get("status") != "completed":
        return None
    return _resolved(pipeline.headline)(summary)


def effects(summary: Mapping[str, Any]) -> list[Effect]:
    """A completed training run's arms against their baseline (its entry's ``effects``); none for another run."""
    pipeline = load().get(summary.get("pipeline", ""))
    if not (pipeline and pipeline.effects) or summary.get("status") != "completed":
        return []
    return _resolved(pipeline.effects)(summary)


Listener = Callable[[Mapping[str, Any]], None]
_listeners: list[Listener] = []


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Inside the block, ``listener`` receives each pipeline summary a nightly finishes (``finished``), in the thread
    that ran the pipeline, as soon as it finishes (the CLI prints its line then)."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def finished(summary: Mapping[str, Any]) -> None:
    """A nightly's pipeline finished (completed, failed or skipped): tell the listeners."""
    for listener in list(_listeners):
        listener(summary)

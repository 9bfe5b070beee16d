"""`augdag why SOURCE LINE`: where one input row went, read → rejected, dropped by a stage, or kept into views."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from conf.errors import AugdagError
from flows.cli_app import CacheOpt, app, catalog_at, fail, out
from storage.dropped import VIEW, RowPath, row_path


@app.command()
def why(
    source: Annotated[str, typer.Argument(help="a dataset name (the profile's `datasets` key, rows' `source`)")],
    line: Annotated[int, typer.Argument(help="the 1-based line (row) of that dataset's input")],
    cache: CacheOpt = None,
) -> None:
    """The path of one input row through the stages: rejected at read, dropped by a stage (reason, run), or
    kept into which views, with the rows derived from it. Exit 2 when the catalog has never seen that row."""
    catalog = catalog_at(cache)
    try:
        if VIEW not in catalog.query("SELECT table_name FROM information_schema.tables")["table_name"].to_pylist():
            with catalog.write():  # a catalog made before the `dropped` view: the write builds it
                pass
        path = row_path(catalog, source, line)
    except AugdagError as e:
        fail(e)
    for text in describe(path):
        out.print(text, highlight=False, soft_wrap=True)


def describe(p: RowPath) -> list[str]:
    """The lines `augdag why` prints (rich markup, the values escaped)."""
    head = f"[bold]{escape(p.source)}:{p.line}[/]"
    if p.rejected:
        r = p.rejected
        return [f"{head}  ({escape(r['file'])})",
                f"  read: [red]rejected[/], {escape(r['reason'])}: {escape(r['detail'] or '')}  (run {p.read_run})"]
    lines = [f"{head}  uid {p.uid}", f"  read: kept  (run {p.read_run})"]
    if not p.sentences:
        return lines + _fate(p, "  ")
    lines.append(f"  split_sentences: {len(p.sentences)} sentence{'s' * (len(p.sentences) != 1)}")
    for s in p.sentences:  # a line split into sentences: each sentence's own path
        lines += [f"  sentence {s.sentence}  uid {s.uid}", *_fate(s, "    ")]
    return lines


def _fate(p: RowPath, indent: str) -> list[str]:
    """A row's drops, views and derived rows, one per line."""
    lines = []
    for d in p.drops:
        detail = f": {escape(d['detail'])}" if d["detail"] else ""
        lines.append(f"{indent}{escape(d['stage'])}: [red]dropped[/], {escape(d['reason'])}{detail}  (run {d['run']})")
    if p.views:
        lines.append(f"{indent}in views: " + ", ".join(escape(v) for v in p.views))
    elif not p.drops:
        lines.append(f"{indent}in no current view")
    if p.derived:
        lines.append(f"{indent}derived rows: " + ", ".join(f"{escape(v)} {n:,}" for v, n in p.derived.items()))
    if p.derived_drops:
        lines.append(f"{indent}derived rows dropped: " + ", ".join(f"{escape(s)} {escape(r)} {n:,}"
                                                                  for (s, r), n in p.derived_drops.items()))
    return lines

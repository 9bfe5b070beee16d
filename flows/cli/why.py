"""`augdag why SOURCE LINE`: the row's text, and where it went: read → rejected, dropped by a stage, or kept into views."""

from __future__ import annotations

from typing import Annotated, Any

import duckdb
import typer
from rich.markup import escape

from conf.errors import AugdagError
from flows.cli.app import CacheOpt, app, existing_catalog_at, fail, out, shown
from storage import objects
from storage.artifacts import part_name
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.dropped import VIEW, RowPath, row_path
from storage.integrity import check_files, missing_part
from storage.sql_guard import query_error


@app.command()
def why(
    source: Annotated[str, typer.Argument(help="a dataset name (the profile's `datasets` key, rows' `source`)")],
    line: Annotated[int, typer.Argument(help="the 1-based line (row) of that dataset's input")],
    cache: CacheOpt = None,
) -> None:
    """The path of one input row through the stages: rejected at read, dropped by a stage (reason, run), or
    kept into which views, with the rows derived from it. Exit 2 when the catalog has never seen that row."""
    catalog = existing_catalog_at(cache)  # no catalog: exit 2, nothing created
    try:
        if VIEW not in catalog.query("SELECT table_name FROM information_schema.tables")["table_name"].to_pylist():
            with catalog.write():  # a catalog made before the `dropped` view: the write builds it
                pass
        path = row_path(catalog, source, line)
        columns = row_text(catalog, source, line)
    except AugdagError as e:
        fail(e)
    except duckdb.Error as e:  # a part deleted under a view (`rejects` names it: storage/catalog_io/rejects.py)
        fail(missing_part(e) or query_error(e))
    for text in describe(path, columns):
        out.print(text, highlight=False, soft_wrap=True)


def row_text(catalog: Catalog, source: str, line: int) -> dict[str, Any]:
    """The row as the current read of ``source`` holds it at ``line``: its columns but uid, source and line
    (bitext: src, tgt; mono: text; labeled: label, text; slots: tokens, tags); a rejected row's ``content``
    (as the read kept it, shortened); {} if it has neither."""
    read = catalog.query(
        "SELECT fingerprint, path, n_shards FROM artifacts WHERE stage = 'read' AND dataset = $s "
        "ORDER BY last_used_at DESC, created_at DESC LIMIT 1",
        {"s": source},
    ).to_pylist()
    if not read:
        return {}
    parts = [str(objects.join(resolve(catalog.root, read[0]["path"]), part_name(i))) for i in range(read[0]["n_shards"] or 0)]
    check_files(parts, root=catalog.root)  # no byte shown that its manifest does not vouch for (issue 48, defect 1)
    rows = (
        catalog.query(
            "SELECT * FROM read_parquet($p, union_by_name = true) WHERE line = $l LIMIT 1", {"p": parts, "l": line}
        ).to_pylist()
        if parts
        else []
    )
    if rows:
        return {k: v for k, v in rows[0].items() if k not in ("uid", "source", "line")}
    rejected = catalog.query(
        "SELECT content FROM rejects WHERE fingerprint = $f AND source = $s AND line = $l LIMIT 1",
        {"f": read[0]["fingerprint"], "s": source, "l": line},
    ).to_pylist()
    return {"content": rejected[0]["content"]} if rejected and rejected[0]["content"] is not None else {}


def _e(value: Any) -> str:
    """``value`` as literal text in a line of rich markup, its control characters escaped (``shown``)."""
    return escape(shown(str(value)))


def describe(p: RowPath, text: dict[str, Any] | None = None) -> list[str]:
    """The lines `augdag why` prints (rich markup; the values escaped, as markup and as control characters: a
    corpus line's ESC or bidi override reaches the terminal as ``\\x1b``, ``\\u202e``): the row's text (``text``:
    column -> value; a rejected row's content), then its path."""
    head = f"[bold]{_e(p.source)}:{p.line}[/]"
    values = [f"  {_e(k)}: {_e(' '.join(map(str, v)) if isinstance(v, list) else v)}" for k, v in (text or {}).items()]
    if p.rejected:
        r = p.rejected
        return [
            f"{head}  ({_e(r['file'])})",
            *values,
            f"  read: [red]rejected[/], {_e(r['reason'])}: {_e(r['detail'] or '')}  (run {_e(p.read_run)})",
        ]
    lines = [f"{head}  uid {_e(p.uid)}", *values, f"  read: kept  (run {_e(p.read_run)})"]
    if not p.sentences:
        return lines + _fate(p, "  ")
    lines.append(f"  split_sentences: {len(p.sentences)} sentence{'s' * (len(p.sentences) != 1)}")
    for s in p.sentences:  # a line split into sentences: each sentence's own path
        lines += [f"  sentence {s.sentence}  uid {_e(s.uid)}", *_fate(s, "    ")]
    return lines


def _fate(p: RowPath, indent: str) -> list[str]:
    """A row's drops, views and derived rows, one per line."""
    lines = []
    for d in p.drops:
        detail = f": {_e(d['detail'])}" if d["detail"] else ""
        lines.append(f"{indent}{_e(d['stage'])}: [red]dropped[/], {_e(d['reason'])}{detail}  (run {_e(d['run'])})")
    if p.views:
        lines.append(f"{indent}in views: " + ", ".join(_e(v) for v in p.views))
    elif not p.drops:
        lines.append(f"{indent}in no current view")
    if p.derived:
        lines.append(f"{indent}derived rows: " + ", ".join(f"{_e(v)} {n:,}" for v, n in p.derived.items()))
    if p.derived_drops:
        lines.append(
            f"{indent}derived rows dropped: " + ", ".join(f"{_e(s)} {_e(r)} {n:,}" for (s, r), n in p.derived_drops.items())
        )
    return lines

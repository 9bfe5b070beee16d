"""What a night prints by default (issue 50): a line per pipeline as it finishes, the verdict table, the night's
report page and three queries; a pipeline's stage table without the stages other pipelines made.

The lines and the table read the registry (flows/engine/registry.py): each pipeline's ``headline`` (what it made,
the one number that matters for it) and each training pipeline's ``effects`` (flows/reports/effect_table.py). The
full stage tables, summary lines and the nightly's table of pipelines stay behind ``-v`` (flows/cli/run.py), and in
the report.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

from flows.cli.app import QUIET, out, verbosity
from flows.engine import registry
from flows.reports.effect_table import effect_rows, size_note

if TYPE_CHECKING:
    from conf.schema import AugdagConf

# the demo's three queries: the effects with their p, the rows dropped per stage and reason, generated rows beside
# their originals (the rest are in docs/sql.md)
DEMO_QUERIES = (
    "SELECT model_name, arm, testset, metric, round(score, 3) AS score, round(p_value, 3) AS p FROM evaluations "
    "ORDER BY created_at",
    "SELECT stage, reason, count(*) AS n FROM dropped GROUP BY ALL ORDER BY n DESC",
    "SELECT c.level, o.text AS original, c.text AS paraphrase FROM curriculum c JOIN curriculum o ON "
    "o.uid = c.parent_uid AND o.level = 0 WHERE c.level = 5 LIMIT 10",
)
NAME_WIDTH = 18  # the longest built-in pipeline name, train_slot_tagger, and a space


def pipeline_line(child: Mapping[str, Any]) -> str:
    """A finished pipeline in one line: its name, what it made, its seconds and the one number that matters
    (``rejuvenation  27 pairs rejuvenated  12.3 s  27 of 279 pairs inactive; …``); a failed or skipped one says so
    with its error."""
    name, seconds = child["pipeline"], child.get("seconds") or 0.0
    if child["status"] != "completed":
        return f"{name:<{NAME_WIDTH}} {child['status']} after {seconds:.1f} s: {child.get('error') or ''}".rstrip(": ")
    try:
        line = registry.headline(child)
    except (KeyError, IndexError, StopIteration, TypeError, ValueError) as e:  # a summary short of a key: said, not fatal
        return f"{name:<{NAME_WIDTH}} {seconds:>7.1f} s  completed; its headline failed: {type(e).__name__}: {e}"
    if line is None:  # a plug-in without a headline: its first summary line
        first = next(iter(registry.summary_lines(child)), "")
        return f"{name:<{NAME_WIDTH}} {seconds:>7.1f} s  {first}".rstrip()
    return f"{name:<{NAME_WIDTH}} {line.made:>24} {seconds:>7.1f} s  {line.number}"


@contextmanager
def announcing() -> Iterator[set[str]]:
    """Inside the block, each pipeline of a nightly prints its ``pipeline_line`` as it finishes (not with ``-q``);
    yields the names announced, so that the end of the night prints the others (skipped ones never ran)."""
    said: set[str] = set()

    def say(child: Mapping[str, Any]) -> None:
        said.add(child["pipeline"])
        if verbosity() > QUIET:
            out.print(escape(pipeline_line(child)), highlight=False, soft_wrap=True)

    with registry.listening(say):
        yield said


def verdict_table(children: Sequence[Mapping[str, Any]]) -> Table | None:
    """The night's verdict table (flows/reports/effect_table.py); None when it ran no augmentation."""
    rows = effect_rows(children)
    if not rows:
        return None
    title = "what each augmentation did to the model trained on it, against that model's baseline"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("augmentation", "rows made", "downstream model", "effect", "what limits it"):
        table.add_column(col, justify="right" if col == "rows made" else "left", no_wrap=col == "augmentation")
    for r in rows:
        table.add_row(*(escape(x) for x in (r.augmentation, r.made, r.model, r.effect, r.caveat)))
    return table


def model_size(conf: AugdagConf) -> str:
    """The demo's downstream models in words, from its profile: ``2+2-layer, 64-dim students of 300 updates``."""
    t = conf.train_nmt.student.train
    return f"{t.encoder_layers}+{t.decoder_layers}-layer, {t.embed_dim}-dim students of {t.max_update:,} updates"


def night_page(cache: Path, run_id: str) -> Path:
    """The night's one report page, ``<cache>/reports/<night>/index.html`` (flows/reports/night_report.py writes it)."""
    return Path(cache).absolute() / "reports" / run_id / "index.html"


def print_verdicts(summary: Mapping[str, Any], conf: AugdagConf | None, *, demo: bool) -> None:
    """After a night: the verdict table, what its size means, and the report page to open (its http:// link while
    `augdag server` serves the reports)."""
    children = summary.get("pipelines", [])
    if (table := verdict_table(children)) is not None:
        out.print(table)
        note = size_note(children, demo=demo, models=model_size(conf) if demo and conf is not None else "")
        if note:
            out.print(escape(note), highlight=False, soft_wrap=True)
    if summary.get("run_id") and summary.get("cache"):
        page, url = written_page(summary)
        out.print(f"report: {escape(str(page))}" + (f"  {url}" if url else ""), highlight=False, soft_wrap=True)


def written_page(summary: Mapping[str, Any]) -> tuple[Path, str | None]:
    """The night's page and its http:// address while `augdag server` serves the reports: as the night recorded them
    (``night_page``, ``night_page_url``: flows/reports/reporting.py ``publish_night``), else where the page goes."""
    from flows.ops.server import report_url

    cache = Path(summary["cache"])
    page = Path(summary["night_page"]) if summary.get("night_page") else night_page(cache, summary["run_id"])
    return page, summary.get("night_page_url") or report_url(cache, page)


def print_queries(cache: str | None) -> None:
    """The demo's three queries, one copy-pastable line each (none with ``-q``)."""
    if verbosity() == QUIET:
        return
    c = f" --cache {cache}" if cache else ""
    out.print("Try:", highlight=False)
    for q in DEMO_QUERIES:
        out.print(f'  augdag sql{c} "{q}"', highlight=False, soft_wrap=True)


def hidden_stages(summary: Mapping[str, Any]) -> dict[str, str]:
    """The stages of a run of one pipeline that another pipeline made and this run found cached: fingerprint -> the
    pipeline whose run created it (the catalog's ``created_run``). A stage this run computed, or one its own
    pipeline made before, stays in the table (it is what the user asked for)."""
    from storage.catalog import Catalog

    cached = sorted({s["fingerprint"] for s in summary.get("stages", []) if s["status"] == "cached"})
    if not cached or not summary.get("cache"):
        return {}
    made = (
        Catalog(Path(summary["cache"]))
        .query(
            "SELECT o.fingerprint, r.pipeline FROM (SELECT fingerprint, created_run FROM artifacts UNION ALL "
            "SELECT fingerprint, created_run FROM models) o JOIN runs r ON r.run_id = o.created_run "
            "WHERE list_contains($fps, o.fingerprint)",
            {"fps": cached},
        )
        .to_pylist()
    )
    return {r["fingerprint"]: r["pipeline"] for r in made if r["pipeline"] != summary["pipeline"]}

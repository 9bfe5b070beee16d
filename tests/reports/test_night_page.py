"""One page per night (issue 50): `<cache>/reports/<night>/index.html`, written by the nightly at its end and by
`augdag report NIGHT`: every pipeline linked, the verdict table, a seeded sample of each augmentation's generated rows
beside their originals, the drops per reason and the rejects, every value escaped."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from flows.reports.examples import AUGMENTATIONS, SEED, K
from storage.catalog import Catalog
from tests.conftest import augdag

GENERATED = {  # the augmentation views' generated rows, counted here by hand (examples.py declares the same rules)
    "synthetic": "SELECT count(*) FROM synthetic",
    "rejuvenated": "SELECT count(*) FROM rejuvenated WHERE origin <> 'original'",
    "curriculum": "SELECT count(*) FROM curriculum WHERE level > 0",
    "paraphrased_bitext": "SELECT count(*) FROM paraphrased_bitext",
    "robust_bitext": "SELECT count(*) FROM robust_bitext",
    "robust_mono": "SELECT count(*) FROM robust_mono",
    "augmented": "SELECT count(*) FROM augmented WHERE selected",
    "c2c_generated": "SELECT count(*) FROM c2c_generated",
}


class Page(HTMLParser):
    """A night page as a test reads it: its tables by class (header and rows of cell texts), the notes before
    each table, its links, and every element closed in order."""

    VOID = {"img", "meta", "br", "hr", "link", "input", "source", "wbr", "col", "area", "base"}

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[list[str]]]] = {}
        self.links: list[str] = []
        self.paragraphs: list[str] = []
        self.stack: list[str] = []
        self._cell: list[str] | None = None
        self._p: list[str] | None = None
        self.feed(text)
        self.close()
        assert self.stack == [], f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag == "a":
            self.links.append(a["href"])
        elif tag == "p":
            self._p = []
        elif tag == "table":
            self._table = self.tables.setdefault(a.get("class") or "", [])
            self._table.append([])
        elif tag == "tr":
            self._table[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()
        if tag in ("td", "th"):
            self._table[-1][-1].append("".join(self._cell or []))
            self._cell = None
        elif tag == "p":
            self.paragraphs.append("".join(self._p or []))
            self._p = None

    def handle_data(self, data):
        for part in (self._cell, self._p):
            if part is not None:
                part.append(data)

    def records(self, cls: str) -> list[dict[str, str]]:
        (found,) = self.tables[cls]
        return [dict(zip(found[0], row)) for row in found[1:]]


def night_of(cache: Path) -> dict:
    row = Catalog(cache).query("SELECT run_id, summary FROM runs WHERE pipeline = 'nightly' ORDER BY started_at DESC LIMIT 1")
    return {"run_id": row["run_id"][0].as_py(), **json.loads(row["summary"][0].as_py())}


def copy_cache(cache: Path, to: Path) -> Path:
    """The cache without its models and logs (a page reads neither), under the catalog's shared lock as readers take
    it; its paths are relative: the copy answers as the original."""
    with open(cache / "catalog.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        ignore = shutil.ignore_patterns("models", "prefect-results", "server", "logs", "*.lock", "demo-data")
        shutil.copytree(cache, to, symlinks=True, ignore=ignore)
    return to


@pytest.fixture(scope="module")
def night(tiny_demo_run, tmp_path_factory) -> tuple[Path, dict, Path]:
    """The session's tiny demo cache (read only here), its night's summary, and the page the nightly wrote."""
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    summary = night_of(tiny_demo_run.cache)
    return tiny_demo_run.cache, summary, tiny_demo_run.cache / "reports" / summary["run_id"] / "index.html"


pytestmark = pytest.mark.slow
tiny_demo = pytest.mark.tiny_demo_run


@tiny_demo
def test_the_nightly_writes_its_page_and_its_summary_names_it(night, tiny_demo_run):
    cache, summary, page = night
    # the summary holds the path the nightly wrote (in the original cache; no server ran: no http:// link)
    assert summary["night_page"] == str(Path(summary["cache"]) / "reports" / summary["run_id"] / "index.html")
    assert "night_page_url" not in summary
    parsed = Page(page.read_text(encoding="utf-8"))
    # what the night's size means, in the words the demo printed under its verdict table
    (size,) = [p for p in parsed.paragraphs if p.startswith("Size: ")]
    assert size.startswith("Size: the demo's tiny models (2+2-layer, 64-dim students of 10 updates), 1 seed: ")
    assert size in tiny_demo_run.stdout
    pipelines = parsed.records("pipelines")
    assert [(r["pipeline"], r["run"], r["status"]) for r in pipelines] == [
        (c["pipeline"], c["run_id"], "completed") for c in summary["pipelines"]
    ]
    # every link resolves to a file beside the page; every pipeline run has one; one without a page links its run page
    for href in parsed.links:
        assert not urllib.parse.urlsplit(href).scheme and (page.parent / urllib.parse.unquote(href)).resolve().is_file(), href
    linked = {Path(urllib.parse.unquote(h)).parent.name: Path(h).name for h in parsed.links}
    assert set(linked) == {c["run_id"] for c in summary["pipelines"]}
    by_pipeline = {c["pipeline"]: linked[c["run_id"]] for c in summary["pipelines"]}
    assert by_pipeline["mt_paraphrase"] == "run.html" and by_pipeline["c2c"] == "c2c.html"
    assert by_pipeline["rejuvenation"] == "rejuvenation.html"


@tiny_demo
def test_every_augmentation_shows_a_seeded_sample_of_its_generated_rows_beside_their_originals(night):
    cache, summary, page = night
    parsed, catalog = Page(page.read_text(encoding="utf-8")), Catalog(cache)
    for aug in AUGMENTATIONS:
        n = catalog.query(GENERATED[aug.view]).column(0)[0].as_py()
        assert f"{n:,} generated rows in `{aug.view}` this night; " in "\n".join(parsed.paragraphs), aug.view
        (shown,) = parsed.tables[f"examples {aug.view}"]
        assert shown[0] == list(aug.columns) and len(shown) - 1 == min(K, n), aug.view
    # the sample: the K rows first by md5(seed || uid), not the first rows; each beside its own original
    rejuvenated = catalog.query(
        "SELECT g.src, o.tgt AS original, g.tgt FROM rejuvenated g JOIN bitext o ON o.uid = g.parent_uid "
        "WHERE g.origin <> 'original' ORDER BY md5($seed || g.uid), g.uid LIMIT $k",
        {"seed": str(SEED), "k": K},
    ).to_pylist()
    rows = Page(page.read_text(encoding="utf-8")).tables["examples rejuvenated"][0][1:]
    assert [r[:3] for r in rows] == [[r["src"], r["original"], r["tgt"]] for r in rejuvenated]
    first = catalog.query("SELECT src FROM rejuvenated WHERE origin <> 'original' ORDER BY source, line LIMIT $k", {"k": K})
    assert [r[0] for r in rows] != first["src"].to_pylist()
    paraphrases = catalog.query(
        "SELECT o.text AS original, g.text, g.level FROM curriculum g JOIN labeled o ON o.uid = g.parent_uid "
        "WHERE g.level > 0 ORDER BY md5($seed || g.uid), g.uid LIMIT $k",
        {"seed": str(SEED), "k": K},
    ).to_pylist()
    rows = parsed.tables["examples curriculum"][0][1:]
    assert [r[:3] for r in rows] == [[p["original"], p["text"], str(p["level"])] for p in paraphrases]
    # C2C: a generated utterance beside its parent cluster's input utterances
    c2c = catalog.query(
        "SELECT g.delex, (SELECT string_agg(o.text, ' | ' ORDER BY o.text) FROM cluster_pairs o "
        "WHERE o.cluster = g.parent_cluster AND o.role = 'input') AS cluster FROM c2c_generated g "
        "ORDER BY md5($seed || g.uid), g.uid LIMIT $k",
        {"seed": str(SEED), "k": K},
    ).to_pylist()
    rows = parsed.tables["examples c2c_generated"][0][1:]
    assert [(r[1], r[2]) for r in rows] == [(c["cluster"], c["delex"]) for c in c2c]


@tiny_demo
def test_the_drops_per_reason_and_the_rejects_are_the_catalogs(night):
    cache, summary, page = night
    parsed, catalog = Page(page.read_text(encoding="utf-8")), Catalog(cache)
    dropped = catalog.query("SELECT stage, source, reason, count(*) AS n FROM dropped GROUP BY ALL").to_pylist()
    shown = parsed.records("dropped")
    per_stage: dict[tuple[str, str], int] = {}  # the page's rows are per dataset of a stage; a dataset's drops may
    for r in shown:  # come from another (a pair's mono side): compared per stage and reason
        per_stage[(r["stage"], r["reason"])] = per_stage.get((r["stage"], r["reason"]), 0) + int(r["rows"].replace(",", ""))
    expected: dict[tuple[str, str], int] = {}
    for d in dropped:
        expected[(d["stage"], d["reason"])] = expected.get((d["stage"], d["reason"]), 0) + d["n"]
    assert per_stage == expected
    assert all(r[f"an example (seed {SEED})"] for r in shown)
    rejects = catalog.query("SELECT source, reason, count(*) AS n FROM rejects GROUP BY ALL").to_pylist()
    assert sorted((r["dataset"], r["reason"], int(r["rows"])) for r in parsed.records("rejects")) == sorted(
        (r["source"], r["reason"], r["n"]) for r in rejects
    )
    # the verdict table: a row per augmentation of the night, as the terminal prints it
    assert [r["augmentation"] for r in parsed.records("effects")][0] == "rejuvenation"  # the profile's first
    assert {r["augmentation"] for r in parsed.records("effects")} == {a.pipeline for a in AUGMENTATIONS}


@tiny_demo
def test_augdag_report_writes_the_night_page_again_the_same(night, tmp_path):
    original, summary, page = night
    before = page.read_text(encoding="utf-8")
    cache = copy_cache(original, tmp_path / "cache")
    page = cache / "reports" / summary["run_id"] / "index.html"
    page.unlink()
    done = augdag(tmp_path, "report", summary["run_id"], "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"wrote {cache.absolute() / 'reports' / summary['run_id'] / 'run.html'}",
        f"wrote {page.absolute()} (the night's page)",
    ]
    again = page.read_text(encoding="utf-8")
    # the same page, the cache's path aside (a copy), plus the link to the night's run page it now finds beside it
    assert again.count(str(cache)) == 1 and "every stage of every pipeline (run.html)" in again
    strip = re.compile(r"cache [^;]*;|<p><a href=\"run.html\">every stage of every pipeline \(run.html\)</a></p>")
    assert strip.sub("", again) == strip.sub("", before)


PAIRS = [f"<b>word</b> {i} & \"q\"\t<i>wort</i> {i} & 'q'" for i in range(12)]  # kept: markup in every cell shown
BAD = "<script>alert(1)</script>\tzwei\tdrei"  # three fields: refused, its content on the page


def test_every_value_on_the_page_is_escaped(prefect_harness, tmp_path):
    from flows.engine.nightly import nightly_flow
    from flows.ops.report_http import serve_reports
    from flows.ops.server import record
    from flows.reports.night_report import night_path

    (tmp_path / "b.tsv").write_text("\n".join([*PAIRS, BAD]) + "\n", encoding="utf-8")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "pipelines: [ingest, robustness]\norchestration: {retries: 0}\n"
        f"datasets:\n  b: {{kind: bitext, format: tsv, path: {tmp_path}/b.tsv}}\n"
        "robustness: {bitext: b, modifiers: [{UpperCase: 1.0}]}\n"
    )
    cache = tmp_path / "cache"
    # `augdag server`'s reports server for this cache (flows/ops/server.py records it): the summary gives the page's URL
    httpd = serve_reports(cache / "reports", 0)
    try:
        (cache / "server").mkdir(parents=True)
        record(cache, "http://127.0.0.1:9", os.getpid(), reports_url=f"http://127.0.0.1:{httpd.server_address[1]}")
        summary = nightly_flow(profile=str(profile), overrides=[], cache=str(cache))
    finally:
        httpd.shutdown()
        httpd.server_close()
    page = night_path(cache, summary["run_id"])
    assert summary["night_page"] == str(page)
    assert summary["night_page_url"] == f"http://127.0.0.1:{httpd.server_address[1]}/{summary['run_id']}/index.html"
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "<b>" not in text and "<i>" not in text
    parsed = Page(text)
    (rejected,) = parsed.records("rejects")
    assert (rejected["dataset"], rejected["reason"], rejected["rows"]) == ("b", "column_count", "1")
    assert "<script>alert(1)</script>" in rejected[f"an example (seed {SEED})"]  # the text, escaped in the markup
    rows = parsed.tables["examples robust_bitext"][0]
    assert [r[0] for r in rows[1:]] == ["UpperCase"] * K
    assert {(r[1], r[2]) for r in rows[1:]} <= {(f'<b>word</b> {i} & "q"', f'<B>WORD</B> {i} & "Q"') for i in range(12)}
    assert "12 generated rows in `robust_bitext` this night; 5 drawn at random (seed 0)" in parsed.paragraphs

"""`augdag report`: the run page and the comparison page of two real ingest runs (issue 6, item 6)."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import flows.cli.report  # noqa: F401 — registers `augdag report` on the app
from conf.loader import load_profile
from flows.cli import app
from flows.reports.plots import html_page, line_figure
from flows.reports.run_report import write_report
from storage.catalog import Catalog

pytestmark = pytest.mark.slow
runner = CliRunner()
VOID = {"img", "meta", "br", "hr", "link", "input", "source", "wbr", "col", "area", "base"}

# A: 12 pairs, one exact duplicate (line 12 = line 1) and one pair of 2 vs 5 tokens (ratio 2.5 > 1.5): 10 kept.
PAIRS_A = [(f"src {i} " + "w " * i, f"tgt {i} " + "v " * i) for i in range(10)] + [("x y", "a b c d e"), ("src 0 ", "tgt 0 ")]
# B: A's 12 and 8 longer pairs, max_ratio 3 keeps the 2-vs-5 pair: 20 - 1 duplicate = 19 kept.
PAIRS_B = PAIRS_A + [(f"long {i} " + "w " * (20 + i), f"lang {i} " + "v " * (20 + i)) for i in range(8)]


class Page(HTMLParser):
    """What a test reads from a page: its tables by class (rows of cell texts), image sources, tags; and
    every element closed in order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[list[str]]]] = {}
        self.images: list[str] = []
        self.tags: set[str] = set()
        self.stack: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()
        assert self.stack == [], f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "table":
            self.tables.setdefault(a.get("class") or "", []).append([])
            self._table = self.tables[a.get("class") or ""][-1]
        elif tag == "tr":
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()
        if tag in ("td", "th"):
            self._table[-1].append("".join(self._cell or []))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def records(table: list[list[str]]) -> list[dict[str, str]]:
    """A parsed table as dicts keyed by its header row."""
    return [dict(zip(table[0], row)) for row in table[1:]]


def assert_self_contained(text: str) -> Page:
    lowered = text.lower()
    for needle in ("<script", "<link", "http://", "https://", "//cdn", "url(", "@import", "<iframe"):
        assert needle not in lowered, needle
    page = Page(text)
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    return page


@pytest.fixture(scope="module")
def runs(prefect_harness, tmp_path_factory):
    """Two ingest runs over one dataset (A older, B newer with more rows and a looser ratio), each with plots;
    evaluations for both; and a nightly run whose pipelines are A and a failed paraphrase run."""
    from flows.engine.runners import run_flow
    from flows.pipelines.ingest import ingest_flow

    tmp = tmp_path_factory.mktemp("report")
    cache = tmp / "cache"
    ids = {}
    for name, pairs, sets in (("a", PAIRS_A, []), ("b", PAIRS_B, ["ingest.clean.max_ratio=3"])):
        for side, col in (("en", 0), ("de", 1)):
            (tmp / f"{name}.{side}").write_text("".join(p[col] + "\n" for p in pairs))
        profile = tmp / f"{name}.yaml"
        profile.write_text(
            f"shard_size: 5\ndatasets:\n  pair:\n    kind: bitext\n    format: text\n"
            f"    src: {tmp}/{name}.en\n    tgt: {tmp}/{name}.de\n"
        )
        conf = load_profile(profile, sets, cache=cache)
        ids[name] = run_flow(ingest_flow, conf, profile=str(profile), config=conf.model_dump(mode="json"))["run_id"]
    catalog = Catalog(cache)
    # plots: A one PNG; B a pipeline-style report page inlining one PNG, and a PNG shown in no page
    line = line_figure({"loss": ([0, 1, 2], [3.0, 2.0, 1.5])}, xlabel="step", ylabel="loss", title="loss")
    other = line_figure({"lr": ([0, 1, 2], [1.0, 0.5, 0.25])}, xlabel="step", ylabel="lr", title="lr")
    (cache / "reports" / ids["a"]).mkdir(parents=True)
    (cache / "reports" / ids["a"] / "loss.png").write_bytes(line)
    (cache / "reports" / ids["b"]).mkdir(parents=True)
    (cache / "reports" / ids["b"] / "loss.png").write_bytes(line)
    (cache / "reports" / ids["b"] / "other.png").write_bytes(other)
    (cache / "reports" / ids["b"] / "uncertainty.html").write_text(
        html_page("uncertainty sampling", [("Training loss", line), ("Sampling", "U_max = 0.4321")]), encoding="utf-8"
    )
    for run_id, bleu, chrf in ((ids["a"], 20.0, 40.0), (ids["b"], 25.5, 41.0)):
        catalog.register_evaluation(
            run_id=run_id,
            model="f" * 32,
            model_name="student",
            testset="pair_test",
            scores=[
                {"metric": "BLEU", "score": bleu, "signature": "nrefs:1", "sentences": 3},
                {"metric": "chrF", "score": chrf, "signature": "nrefs:1", "sentences": 3},
            ],
            meta={},
        )
    catalog.register_evaluation(
        run_id=ids["b"],
        model="e" * 32,
        model_name="classifier",
        testset="labeled_test",
        scores=[{"metric": "accuracy", "score": 0.75, "signature": "classes:6", "sentences": 4}],
        meta={},
    )
    failed_stage = {
        "stage": "paraphrase_scores",
        "dataset": "pair",
        "fingerprint": "d" * 32,
        "status": "failed",
        "shards": 2,
        "shards_computed": 0,
        "rows_in": 0,
        "rows_out": {},
        "seconds": 0.5,
        "error": "stage 'paraphrase_scores' failed on shard(s) [1] of 2: ModelError: boom",
        "failed_shards": [1],
        "kind": "artifact",
    }
    catalog.start_run("paraphrase-x", pipeline="paraphrase", profile="p", config={}, flow_run_id=None)
    catalog.finish_run(
        "paraphrase-x",
        status="failed",
        summary={"run_id": "paraphrase-x", "stages": [failed_stage], "error": failed_stage["error"]},
    )
    summary_a = json.loads(catalog.query("SELECT summary FROM runs WHERE run_id = $r", {"r": ids["a"]})["summary"][0].as_py())
    catalog.start_run("nightly-x", pipeline="nightly", profile="p", config={}, flow_run_id=None)
    catalog.finish_run(
        "nightly-x",
        status="failed",
        summary={
            "run_id": "nightly-x",
            "pipeline": "nightly",
            "status": "failed",
            "error": "paraphrase failed: boom",
            "stages": [],
            "pipelines": [
                {**summary_a, "pipeline": "ingest", "seconds": 1.0},
                {
                    "pipeline": "paraphrase",
                    "run_id": "paraphrase-x",
                    "status": "failed",
                    "seconds": 0.5,
                    "error": "StageError: boom",
                    "stages": [failed_stage],
                },
                {
                    "pipeline": "train_classifier",
                    "run_id": None,
                    "status": "skipped",
                    "seconds": 0.0,
                    "error": "upstream pipeline(s) paraphrase did not complete",
                    "stages": [],
                },
            ],
        },
    )
    return cache, ids


def _png_payloads(folder: Path) -> set[str]:
    return {base64.b64encode(p.read_bytes()).decode() for p in folder.glob("*.png")}


def test_report_run_page_is_self_contained_with_every_plot_once_and_catalog_counts(runs):
    cache, ids = runs
    result = runner.invoke(app, ["report", ids["b"], "--cache", str(cache)])
    assert result.exit_code == 0, result.output
    path = cache / "reports" / ids["b"] / "run.html"
    assert result.output.strip() == f"wrote {path}"
    page = assert_self_contained(path.read_text(encoding="utf-8"))
    payloads = [src.split(",", 1)[1] for src in page.images]
    assert sorted(payloads) == sorted(_png_payloads(path.parent))  # every PNG exactly once (loss.png via its page)
    assert len(payloads) == 2
    text = path.read_text(encoding="utf-8")
    assert "U_max = 0.4321" in text and "report page uncertainty.html" in text  # the pipeline page's content
    catalog = Catalog(cache)
    shards = {
        (r["stage"], r["dataset"]): r
        for r in catalog.query(
            "SELECT stage, dataset, count(*) AS shards, count(*) FILTER (status = 'computed') AS computed, "
            "sum(rows_out) AS rows_out FROM stage_runs WHERE run_id = $r GROUP BY ALL",
            {"r": ids["b"]},
        ).to_pylist()
    }
    table = {(r["stage"], r["dataset"]): r for r in records(page.tables["stages"][0])}
    assert set(table) == set(shards) == {("read", "pair"), ("duplicates", "pair"), ("clean", "pair")}
    for key, s in shards.items():
        assert (table[key]["shards"], table[key]["shards computed"], table[key]["rows out: part"]) == (
            f"{s['shards']:,}",
            f"{s['computed']:,}",
            f"{s['rows_out']:,}",
        )
    assert (table[("read", "pair")]["shards"], table[("read", "pair")]["rows out: part"]) == ("4", "20")
    assert (table[("clean", "pair")]["rows out: part"], table[("clean", "pair")]["rows out: dropped"]) == ("19", "1")
    scores = {(r["model"], r["metric"]): r["score"] for r in records(page.tables["evaluations"][0])}
    assert scores == {("student", "BLEU"): "25.5000", ("student", "chrF"): "41.0000", ("classifier", "accuracy"): "0.7500"}
    again = write_report(catalog, ids["b"])  # its own earlier page is never inlined as a pipeline's
    assert again == path and len(Page(path.read_text(encoding="utf-8")).images) == 2


def test_report_compare_shows_row_changes_distributions_and_score_deltas(runs):
    cache, ids = runs
    result = runner.invoke(app, ["report", ids["b"], "--compare", ids["a"], "--cache", str(cache)])
    assert result.exit_code == 0, result.output
    path = cache / "reports" / ids["b"] / f"compare-{ids['a']}-vs-{ids['b']}.html"  # A, the older, first
    assert result.output.strip() == f"wrote {path}"
    page = assert_self_contained(path.read_text(encoding="utf-8"))
    assert len(page.images) == 1  # one box plot: bitext, the one view both runs produced
    counts = {(r["stage"], r["role"]): r for r in records(page.tables["counts"][0])}
    assert [counts[("read", "part")][k] for k in ("rows A", "rows B", "change", "output")] == ["12", "20", "+8", "changed"]
    assert [counts[("clean", "part")][k] for k in ("rows A", "rows B", "change")] == ["10", "19", "+9"]
    assert [counts[("clean", "dropped")][k] for k in ("rows A", "rows B", "change")] == ["2", "1", "-1"]
    stats = {(r["measure"], r["run"]): r for r in records(page.tables["stats"][0])}
    assert set(stats) == {(m, run) for m in ("tokens(src)", "tokens(tgt)", "line") for run in "AB"}
    # A keeps `src i w×i` (i = 0..9): 2..11 tokens; B adds `long i w×(20+i)`: up to 29
    assert [stats[("tokens(src)", "A")][k] for k in ("count", "min", "max")] == ["10", "2", "11"]
    assert [stats[("tokens(src)", "B")][k] for k in ("count", "min", "max")] == ["19", "2", "29"]
    scores = {(r["model"], r["metric"]): (r["A"], r["B"], r["change"]) for r in records(page.tables["scores"][0])}
    assert scores == {
        ("student", "BLEU"): ("20.0000", "25.5000", "+5.5000"),
        ("student", "chrF"): ("40.0000", "41.0000", "+1.0000"),
        ("classifier", "accuracy"): ("–", "0.7500", "only in B"),
    }
    out = cache / "elsewhere" / "cmp.html"
    assert runner.invoke(app, ["report", ids["a"], "--compare", ids["b"], "-o", str(out), "--cache", str(cache)]).exit_code == 0
    assert records(Page(out.read_text(encoding="utf-8")).tables["counts"][0]) == records(page.tables["counts"][0])


def test_report_nightly_run_covers_each_pipeline_run_and_its_failures(runs):
    cache, ids = runs
    path = write_report(Catalog(cache), "nightly-x")
    text = path.read_text(encoding="utf-8")
    page = assert_self_contained(text)
    assert [(r["pipeline"], r["run"], r["status"]) for r in records(page.tables["pipelines"][0])] == [
        ("ingest", ids["a"], "completed"),
        ("paraphrase", "paraphrase-x", "failed"),
        ("train_classifier", "–", "skipped"),
    ]
    assert len(page.tables["stages"]) == 2  # ingest's and paraphrase's; the skipped pipeline ran nothing
    assert "ModelError: boom" in text and "upstream pipeline(s) paraphrase did not complete" in text
    assert [src.split(",", 1)[1] for src in page.images] == list(_png_payloads(cache / "reports" / ids["a"]))
    assert {r["score"] for r in records(page.tables["evaluations"][0])} == {"20.0000", "40.0000"}  # A's only


def test_report_unknown_run_exits_2_naming_it_and_the_recent_runs(runs):
    cache, ids = runs
    result = runner.invoke(app, ["report", "no-such-run", "--cache", str(cache)])
    text = result.output.replace("\n", "")
    assert result.exit_code == 2
    assert "no run 'no-such-run'" in text
    assert all(r in text for r in (ids["a"], ids["b"], "paraphrase-x", "nightly-x"))
    assert runner.invoke(app, ["report", ids["a"], "--compare", "nope", "--cache", str(cache)]).exit_code == 2


def test_html_page_formats_cells_as_the_run_pages_do_and_carries_no_generator_mark():
    """One HTML builder (flows.reports.html): a pipeline's table cells read like the run page's (numbers right-aligned,
    thousands separators, None as –), and without the run pages' generator mark a run page inlines the page."""
    text = html_page(
        "t & t", [("T", pa.table({"rows": [1, 12345], "p": [0.5, None], "s": ["a<b", "c"]})), ("Sampling", "U_max = 0.4321")]
    )
    assert "<tr><td class=n>1</td><td class=n>0.5000</td><td>a&lt;b</td></tr>" in text
    assert Page(text).tables[""] == [[["rows", "p", "s"], ["1", "0.5000", "a<b"], ["12,345", "–", "c"]]]
    assert "<h1>t &amp; t</h1>" in text and "<p>U_max = 0.4321</p>" in text and 'name="generator"' not in text

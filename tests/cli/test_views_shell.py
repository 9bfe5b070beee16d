"""`augdag views` and its documentation (storage.views.docs, by pipeline through flows.engine.registry), and the read-only
`augdag sql --shell` (issue 6, item 7)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.cli.shell import split_statements
from flows.engine import registry
from storage.catalog import BASE_VIEWS, Catalog
from storage.views.docs import INGEST_VIEWS, TABLES, UNDOCUMENTED
from tests.conftest import REPO

runner = CliRunner()
DDL_TABLES = ["artifacts", "evaluations", "lineage", "models", "reject_counts", "runs", "stage_runs"]
FRESH_VIEWS = sorted(
    ["bitext", "dropped", "evaluation_summary", "labeled", "mono", "rejects", "slots"]  # rejects: a view (issue 51)
    + ["heldout_bitext", "heldout_labeled", "heldout_mono", "heldout_slots"]  # issue 47: test sets apart
)  # on a fresh catalog
VIEWS = registry.view_docs()  # every registered pipeline's views
DOCS = {**TABLES, **VIEWS}


@pytest.fixture(autouse=True)
def _fresh_catalog(request):
    """A test's tmp_path holds an empty catalog: read commands on a cache without one exit 2 (issue 26, defect 6)."""
    if "tmp_path" in request.fixturenames:
        with Catalog(request.getfixturevalue("tmp_path")).write():
            pass


def _columns(catalog: Catalog, name: str) -> list[str]:
    return catalog.query(f'DESCRIBE "{name}"')["column_name"].to_pylist()


def test_views_doc_documents_every_column_of_the_ddl_tables_and_base_views(tmp_path):
    catalog = Catalog(tmp_path)
    found = catalog.query("SELECT table_name, table_type FROM information_schema.tables ORDER BY ALL").to_pylist()
    assert (
        [r["table_name"] for r in found if r["table_type"] == "BASE TABLE"]
        == DDL_TABLES
        == sorted(n for n, d in TABLES.items() if d.kind == "table" and n != "rejects_legacy")  # only in a migrated one
    )
    assert (
        FRESH_VIEWS
        == sorted([*BASE_VIEWS, "dropped", "evaluation_summary", "rejects"])
        == [r["table_name"] for r in found if r["table_type"] == "VIEW"]
    )
    for name in DDL_TABLES + FRESH_VIEWS:
        assert list(DOCS[name].columns) == _columns(catalog, name), name  # every column, in order, none stale
        assert DOCS[name].kind == ("table" if name in DDL_TABLES else "view")
        assert all(d.strip() and d != UNDOCUMENTED for d in DOCS[name].columns.values())


def test_views_doc_matches_the_stage_output_schemas():
    from models.lexicon import LEXICON, WORD_UNCERTAINTY
    from storage.schemas import BITEXT
    from tasks.common.nmt import SCORES
    from tasks.epida.feedback import AUGMENTED
    from tasks.paraphrase.curriculum import CURRICULUM
    from tasks.rejuvenation.rejuvenate import REJUVENATED
    from tasks.self_training.alignment import ALIGNMENT
    from tasks.self_training.uncertainty import SAMPLED, SCORED
    from tasks.train_classifier.classify import PREDICTIONS
    from tasks.train_nmt.experiments import ARM_MIX
    from tasks.train_nmt.significance import TRANSLATIONS

    schemas = {
        "alignments": ALIGNMENT,
        "lexicon": LEXICON,
        "word_uncertainty": WORD_UNCERTAINTY,
        "uncertainty": SCORED,
        "sampled_mono": SAMPLED,
        "pair_scores": SCORES,
        "rejuvenated": REJUVENATED,
        "training_mix": ARM_MIX,
        "curriculum": CURRICULUM,
        "test_predictions": PREDICTIONS,
        "augmented": AUGMENTED,
        "test_translations": TRANSLATIONS,
    }
    for view, schema in schemas.items():
        assert list(VIEWS[view].columns) == schema.names, view
    assert list(VIEWS["inactive"].columns) == BITEXT.names + ["tokens", "cross_entropy", "prob", "state"]
    per_pipeline = [set(p.views) for p in registry.load().values()]
    assert sum(map(len, per_pipeline)) == len(VIEWS)  # no view documented by two pipelines
    assert set(INGEST_VIEWS) == set(BASE_VIEWS)  # ingest's views are the record kinds, there from the start


def test_views_doc_covers_every_view_a_stage_or_flow_declares():
    declared = {
        m
        for f in [*(REPO / "tasks").rglob("*.py"), *(REPO / "flows").rglob("*.py")]
        for m in re.findall(r'view="(\w+)"', f.read_text())
    }
    assert declared | set(BASE_VIEWS) == set(VIEWS)  # a view a stage fills without docs fails here, by name


def test_views_lists_tables_then_views_with_counts_and_descriptions_on_a_fresh_catalog(tmp_path):
    result = runner.invoke(app, ["views", "--cache", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines() if line.startswith("│")]
    names = DDL_TABLES + FRESH_VIEWS
    assert rows == [[n, "table" if n in DDL_TABLES else "view", "0", DOCS[n].what] for n in names]
    assert result.output.splitlines()[-1] == "18 row(s)"


def test_views_name_json_gives_every_column_with_type_and_description(tmp_path):
    result = runner.invoke(app, ["views", "bitext", "--format", "json", "--cache", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert {(r["name"], r["kind"]) for r in rows} == {("bitext", "view")}
    assert [(r["column"], r["type"]) for r in rows] == [
        ("uid", "VARCHAR"),
        ("src", "VARCHAR"),
        ("tgt", "VARCHAR"),
        ("source", "VARCHAR"),
        ("line", "BIGINT"),
    ]
    assert [r["description"] for r in rows] == [DOCS["bitext"].columns[r["column"]] for r in rows]
    assert rows[1]["description"] == "source-language sentence"
    everything = [
        json.loads(line) for line in runner.invoke(app, ["views", "-f", "json", "--cache", str(tmp_path)]).output.splitlines()
    ]
    assert len(everything) == 84 + 2 + 10 + 6 + 10 + 1 + 20 + 3 + 6 and not [  # + 1: mono's sentence (issue 26); + 20:
        # heldout_*; + 3: dropped's src, tgt, text (issue 47); + 6: reject_counts (issue 51)
        r
        for r in everything
        if r["description"] == UNDOCUMENTED
    ]


def test_views_unknown_name_exits_2_naming_the_known_ones(tmp_path):
    result = runner.invoke(app, ["views", "nope", "--cache", str(tmp_path)])
    assert result.exit_code == 2
    assert (
        "unknown table or view 'nope'; expected one of artifacts, evaluations, lineage, models, reject_counts, runs, "
        "stage_runs, bitext, dropped, evaluation_summary, heldout_bitext, heldout_labeled, heldout_mono, heldout_slots, "
        "labeled, mono, rejects, slots"
    ) in " ".join(result.output.split())
    later = runner.invoke(app, ["views", "curriculum", "--cache", str(tmp_path)])
    assert later.exit_code == 2 and "not in this catalog until its stage has run" in later.output


def test_views_column_the_registry_lacks_shows_undocumented(tmp_path, monkeypatch):
    monkeypatch.setitem(INGEST_VIEWS, "mono", INGEST_VIEWS["mono"].__class__("m", {"uid": "u"}))
    rows = [
        json.loads(line)
        for line in runner.invoke(app, ["views", "mono", "-f", "json", "--cache", str(tmp_path)]).output.splitlines()
    ]
    assert [r["description"] for r in rows] == ["u", UNDOCUMENTED, UNDOCUMENTED, UNDOCUMENTED, UNDOCUMENTED]


def test_sql_shell_runs_multiline_statements_refuses_writes_and_goes_on(tmp_path):
    result = runner.invoke(
        app,
        ["sql", "--shell", "--cache", str(tmp_path)],
        input="SELECT 1 AS a;\nSELECT\n 2 AS b;\nDROP TABLE runs;\n.views\n.quit\n",
    )
    assert result.exit_code == 1, result.output  # piped: a refused statement fails the script (issue 48, defect 9)
    lines = result.output.splitlines()
    assert lines[:12] == [
        "┏━━━┓",
        "┃ a ┃",
        "┡━━━┩",
        "│ 1 │",
        "└───┘",
        "1 row(s)",
        "┏━━━┓",
        "┃ b ┃",
        "┡━━━┩",
        "│ 2 │",
        "└───┘",
        "1 row(s)",
    ]
    assert lines[12] == (
        "error: line 4: refused: `augdag sql` is read-only and this is a DROP statement: 'DROP TABLE runs'. "
        "Hint: use SELECT over the views; `augdag export VIEW` writes files."
    )
    listed = [line.split("│")[1].strip() for line in lines[13:] if line.startswith("│")]
    assert listed == DDL_TABLES + FRESH_VIEWS  # .views ran after the refusal
    assert lines[-2:] == ["18 row(s)", "error: 1 statement(s) failed"]
    assert Catalog(tmp_path).query("SELECT count(*) AS n FROM runs")["n"].to_pylist() == [0]


def test_sql_shell_prints_errors_runs_dot_commands_and_stops_at_eof(tmp_path):
    script = (
        "SELECT * FROM no_such_view;\n.schema labeled\n.schema nope\n.frobnicate\n"
        "-- a comment; not a statement\nSELECT 'a;b' AS s;\nSELECT 3 AS c"
    )
    result = runner.invoke(app, ["sql", "--shell", "-f", "json", "--cache", str(tmp_path)], input=script)
    assert result.exit_code == 1, result.output  # 3 failed and 1 not run (issue 48, defect 9)
    out = result.output
    assert "error: line 1: query failed: Catalog Error: Table with name no_such_view does not exist" in out
    assert "error: line 3: unknown table or view 'nope'" in out and "error: line 4: unknown command '.frobnicate'" in out
    assert [json.loads(line)["column"] for line in out.splitlines() if line.startswith('{"column"')] == [
        "uid",
        "text",
        "label",
        "source",
        "line",
    ]
    assert '{"s": "a;b"}' in out.splitlines()
    assert out.splitlines()[-2:] == [
        "error: line 7: not run: the last statement has no `;`: 'SELECT 3 AS c'",
        "error: 4 statement(s) failed",
    ]


@pytest.mark.parametrize(
    "args, says",
    [
        (["sql"], "give a QUERY, or --shell"),
        (["sql", "SELECT 1", "--shell"], "give no QUERY"),
        (["views", "--format", "csv"], "expected one of table, json"),
    ],
)
def test_sql_and_views_bad_usage_exits_2(tmp_path, args, says):
    result = runner.invoke(app, [*args, "--cache", str(tmp_path)])
    assert result.exit_code == 2 and says in result.output


@pytest.mark.parametrize(
    "text, done, rest",
    [
        ("SELECT 1;", ["SELECT 1"], ""),
        ("SELECT 1; SELECT 2;\nSELECT", ["SELECT 1", "SELECT 2"], "\nSELECT"),
        ("SELECT 'a;''b'; SELECT \"x;y\" FROM t;", ["SELECT 'a;''b'", 'SELECT "x;y" FROM t'], ""),
        ("SELECT 1 -- no; end\n;", ["SELECT 1 -- no; end"], ""),
        ("SELECT /* ; */ 1;;", ["SELECT /* ; */ 1"], ""),
        ("SELECT 'open;\n", [], "SELECT 'open;\n"),
        ("-- only; a comment\n ;", [], ""),
        ("/* open; ", [], "/* open; "),
    ],
)
def test_split_statements_ends_at_semicolons_outside_quotes_and_comments(text, done, rest):
    assert split_statements(text) == (done, rest)

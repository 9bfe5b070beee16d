"""The `dropped` view and `augdag why` (issue 18, item 4): every row a stage dropped, with its stage and reason, so
that per stage input rows = kept + rejected + dropped; and the path of one input row through the stages."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow as pa
import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from storage.dropped import COLUMNS
from storage.views.docs import TABLES
from storage.views.dropped_docs import DROPPED_COLUMNS
from tests.conftest import REPO, bitext, catalog_rows, subprocess_env

pytestmark = pytest.mark.slow
AUGDAG = [sys.executable, "-m", "flows.cli"]
# a tiny bitext: 1 kept, 2 kept, 3 a duplicate of 1, 4 over max_tokens (6), 5 bad UTF-8, 6 a ratio of 2, 7 kept
TINY = [
    (b"the cat sat", b"die katze sass"),
    (b"a dog ran home", b"ein hund lief heim"),
    (b"the cat sat", b"die katze sass"),
    (b"one two three four five six seven eight", b"eins zwei"),
    (b"bad \xff byte", b"schlecht"),
    (b"good morning to you", b"guten morgen"),
    (b"x", b"y"),
]
NO_SLOTS = {"tokens": ["hello", "there"], "tags": ["O", "O"]}  # appended to the demo slots: delexicalise drops it
C2C_SETS = [
    "shard_size=150",
    "pipelines=[ingest, c2c]",
    "c2c.dataset=demo_slots",  # the slots with the planted rows (the demo's c2c trains on demo_slots_small)
    "c2c.cluster_size=3",
    "c2c.folds=2",
    "c2c.n_outputs=4",
    "c2c.model.epochs=2",
    "c2c.model.d_model=32",
    "c2c.model.threads=1",
]


def _why(cache, tmp_path, *args):
    return subprocess.run(
        [*AUGDAG, "why", *args, "--cache", str(cache)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=subprocess_env(tmp_path),
        timeout=120,
    )


def _cookbook_accounting_query() -> str:
    """The SQL cookbook's accounting query (docs/sql.md, "Where every input row went"), as a shell would pass it."""
    text = (REPO / "docs" / "sql.md").read_text()
    query = re.search(r'^\$ augdag sql "(WITH current AS .*? ORDER BY c\.dataset, c\.created_at)"$', text, re.M)[1]
    return query.replace("\\$", "$")


# -- the view over hand-made artifacts -------------------------------------------------------------------------------


def _artifact(cache, stage, fp, kept: pa.Table, dropped: pa.Table, *, view=None, dataset="d", run="r1"):
    ref = ArtifactRef(str(cache), stage, fp, view, dataset, 1)
    write_part(dropped, ref.path(0, "dropped"))
    write_part(kept, ref.path(0))
    Catalog(cache).register(ref, write_manifest(ref, version="1", params={}), run_id=run)


def test_dropped_view_unions_each_stage_columns_with_null_for_what_it_lacks(tmp_path):
    lm = pa.table(
        {
            "uid": ["s1", "s2"],
            "src": ["a", "b"],
            "tgt": ["x", "y"],
            "source": ["mono", "mono"],
            "line": [4, 9],
            "parent_uid": ["m4", "m9"],
            "lm_cross_entropy": [7.31249, 6.0],
            "reason": ["lm_score", "lm_score"],
        }
    )
    mt = pa.table(
        {"parent_uid": ["b1"], "source": ["bi"], "line": [2], "paraphrase": ["p"], "jaccard": [0.9], "reason": ["too_similar"]}
    )
    _artifact(tmp_path, "lm_filter", "f1", lm.slice(0, 0).drop_columns(["reason"]), lm)  # internal: no view
    _artifact(tmp_path, "paraphrased_bitext", "f2", pa.table({"uid": ["k"]}), mt, view="paraphrased_bitext", run="r2")
    _artifact(tmp_path, "clean", "f3", pa.table({"uid": ["k"]}), pa.table({"uid": ["e"], "reason": ["empty"]}), dataset="other")
    rows = catalog_rows(tmp_path, "SELECT * FROM dropped ORDER BY fingerprint, line")
    assert rows == [
        {
            "stage": "lm_filter",
            "reason": "lm_score",
            "detail": "lm_cross_entropy=7.312",
            "source": "mono",
            "line": 4,
            "sentence": None,
            "uid": "s1",
            "parent_uid": "m4",
            "run": "r1",
            "fingerprint": "f1",
            "src": "a",
            "tgt": "x",
            "text": None,
        },
        {
            "stage": "lm_filter",
            "reason": "lm_score",
            "detail": "lm_cross_entropy=6.0",
            "source": "mono",
            "line": 9,
            "sentence": None,
            "uid": "s2",
            "parent_uid": "m9",
            "run": "r1",
            "fingerprint": "f1",
            "src": "b",
            "tgt": "y",
            "text": None,
        },
        {
            "stage": "paraphrased_bitext",
            "reason": "too_similar",
            "detail": "jaccard=0.9",
            "source": "bi",
            "line": 2,
            "sentence": None,
            "uid": None,
            "parent_uid": "b1",
            "run": "r2",
            "fingerprint": "f2",
            "src": None,
            "tgt": None,
            "text": None,
        },
        {
            "stage": "clean",
            "reason": "empty",
            "detail": None,
            "source": None,
            "line": None,
            "sentence": None,
            "uid": "e",
            "parent_uid": None,
            "run": "r1",
            "fingerprint": "f3",
            "src": None,
            "tgt": None,
            "text": None,
        },
    ]
    # a newer artifact of the same stage and dataset replaces the old one's drops, as in every view
    _artifact(tmp_path, "lm_filter", "f4", lm.slice(0, 0).drop_columns(["reason"]), lm.slice(1), run="r3")
    assert catalog_rows(tmp_path, "SELECT fingerprint, line, run FROM dropped WHERE stage = 'lm_filter'") == [
        {"fingerprint": "f4", "line": 9, "run": "r3"}
    ]


def test_why_lists_the_views_the_derived_rows_and_their_drops_of_a_kept_row(tmp_path):
    from flows.cli.why import describe
    from storage.dropped import row_path

    rows = bitext([("a b", "x y"), ("c d", "z w"), ("e f g h", "v")], source="d")
    _artifact(tmp_path, "read", "fr", rows, rows.slice(0, 0).append_column("reason", pa.array([], pa.string())))
    too_long = rows.slice(2).append_column("reason", pa.array(["too_many_tokens"]))
    _artifact(tmp_path, "clean", "fc", rows.slice(0, 2), too_long, view="bitext")
    u1 = rows["uid"][0].as_py()
    cands = pa.table(
        {
            "uid": ["p1", "p2", "p3"],
            "parent_uid": [u1] * 3,
            "text": ["q", "r", "s"],
            "source": ["d"] * 3,
            "line": [1] * 3,
            "mi": [True, True, False],
            "sim": [0.9, 0.8, 0.41234],
        }
    )
    _artifact(
        tmp_path,
        "curriculum",
        "fp",
        cands.slice(0, 2),
        cands.slice(2).append_column("reason", pa.array(["not_mi_below_beta"])),
        view="curriculum",
        run="r2",
    )
    assert catalog_rows(tmp_path, "SELECT stage, detail, uid, parent_uid FROM dropped WHERE stage = 'curriculum'") == [
        {"stage": "curriculum", "detail": "mi=false, sim=0.412", "uid": "p3", "parent_uid": u1}
    ]
    path = row_path(Catalog(tmp_path), "d", 1)
    assert (path.uid, path.drops, path.views, path.derived, path.derived_drops) == (
        u1,
        (),
        {"bitext": 1},
        {"curriculum": 2},
        {("curriculum", "not_mi_below_beta"): 1},
    )
    assert describe(path) == [
        f"[bold]d:1[/]  uid {u1}",
        "  read: kept  (run r1)",
        "  in views: bitext",
        "  derived rows: curriculum 2",
        "  derived rows dropped: curriculum not_mi_below_beta 1",
    ]
    dropped = row_path(Catalog(tmp_path), "d", 3)
    assert [(d["stage"], d["reason"], d["run"]) for d in dropped.drops] == [("clean", "too_many_tokens", "r1")]
    assert (dropped.views, dropped.derived) == ({}, {})


def test_dropped_view_carries_each_row_text_a_pair_a_sentence_or_a_slots_rows_tokens(tmp_path):
    """Issue 47: a user reads the dropped row itself, not its line in a file they must open."""
    pairs = pa.table({"uid": ["p"], "src": ["ein haus"], "tgt": ["a house"], "reason": ["length_ratio"]})
    sentences = pa.table({"uid": ["m"], "text": ["a dog runs"], "tokens": [3], "reason": ["too_few_tokens"]})  # a count
    slots = pa.table({"uid": ["s"], "tokens": [["fly", "to", "boston"]], "tags": [["O", "O", "B-city"]], "reason": ["x"]})
    _artifact(tmp_path, "clean", "f1", pairs.slice(0, 0), pairs, dataset="bi")
    _artifact(tmp_path, "clean", "f2", sentences.slice(0, 0), sentences, dataset="mono")
    _artifact(tmp_path, "delexicalise", "f3", slots.slice(0, 0), slots, dataset="slots")
    assert catalog_rows(tmp_path, "SELECT uid, src, tgt, text FROM dropped ORDER BY fingerprint") == [
        {"uid": "p", "src": "ein haus", "tgt": "a house", "text": None},
        {"uid": "m", "src": None, "tgt": None, "text": "a dog runs"},
        {"uid": "s", "src": None, "tgt": None, "text": "fly to boston"},
    ]


def test_dropped_view_is_there_typed_and_documented_on_a_fresh_catalog(tmp_path):
    described = catalog_rows(tmp_path, "DESCRIBE dropped")
    assert [(r["column_name"], r["column_type"]) for r in described] == list(COLUMNS.items())
    assert list(DROPPED_COLUMNS) == list(COLUMNS) and TABLES["dropped"].columns == DROPPED_COLUMNS
    assert catalog_rows(tmp_path, "SELECT count(*) AS n FROM dropped") == [{"n": 0}]


# -- a tiny bitext with planted drops, through ingest, and `augdag why` ------------------------------------------------


@pytest.fixture(scope="module")
def tiny(prefect_harness, tmp_path_factory):
    from flows.pipelines.ingest import ingest_flow

    data = tmp_path_factory.mktemp("tiny-data")
    (data / "train.en").write_bytes(b"".join(s + b"\n" for s, _ in TINY))
    (data / "train.de").write_bytes(b"".join(t + b"\n" for _, t in TINY))
    (data / "p.yaml").write_text(
        "pipelines: [ingest]\nshard_size: 4\ningest: {clean: {max_tokens: 6, max_ratio: 1.5}}"
        "\ndatasets:\n  tiny: {kind: bitext, format: text, src: train.en, tgt: train.de}\n"
    )
    cache = tmp_path_factory.mktemp("tiny-cache")
    summary = ingest_flow(load_profile(data / "p.yaml", [], cache=cache), profile="test")
    return cache, summary


def test_dropped_view_holds_each_planted_drop_with_its_stage_and_reason(tiny):
    cache, summary = tiny
    clean = next(s for s in summary["stages"] if s["stage"] == "clean")
    assert catalog_rows(cache, "SELECT stage, reason, detail, source, line, run, fingerprint FROM dropped ORDER BY line") == [
        {
            "stage": "clean",
            "reason": r,
            "detail": detail,
            "source": "tiny",
            "line": line,
            "run": summary["run_id"],
            "fingerprint": clean["fingerprint"],
        }
        for line, r, detail in [  # issue 26: the value each was cut on
            (3, "duplicate", "the same row as line 1, which is kept"),
            (4, "too_many_tokens", "src_tokens=8, tgt_tokens=2"),
            (6, "length_ratio", "ratio=2 (src_tokens=4, tgt_tokens=2)"),
        ]
    ]
    assert [tuple(r.values()) for r in catalog_rows(cache, _cookbook_accounting_query())] == [
        ("tiny", "read", 7, 6, 1, 0),
        ("tiny", "clean", 6, 3, 0, 3),
    ]


@pytest.mark.parametrize(
    "line, says",
    ids=["duplicate", "too_long", "ratio", "bad_utf8", "kept"],
    argvalues=[
        (3, "  clean: dropped, duplicate: the same row as line 1, which is kept  (run {run})"),
        (4, "  clean: dropped, too_many_tokens: src_tokens=8, tgt_tokens=2  (run {run})"),  # issue 26: the value cut on
        (6, "  clean: dropped, length_ratio: ratio=2 (src_tokens=4, tgt_tokens=2)  (run {run})"),
        (5, "  read: rejected, invalid_utf8: src: invalid UTF-8 at byte 4  (run {run})"),
        (7, "  in views: bitext"),
    ],
)
def test_why_prints_the_stage_and_reason_of_a_planted_row(tiny, tmp_path, line, says):
    cache, summary = tiny
    done = _why(cache, tmp_path, "tiny", str(line))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"tiny:{line}  ")
    assert says.format(run=summary["run_id"]) in lines
    assert ("dropped" in done.stdout) == (line in (3, 4, 6))


@pytest.mark.parametrize(
    "source, line, says",
    ids=["no_line", "no_dataset"],
    argvalues=[
        (
            "tiny",
            "8",
            "tiny:8: the catalog has never seen this row: the current read of 'tiny' (run {run}) has no "
            "line 8 in its 7 input rows",
        ),
        ("nope", "1", "nope:1: the catalog has never seen this row: no dataset 'nope' was read; the datasets read are tiny"),
    ],
)
def test_why_exits_2_naming_source_and_line_the_catalog_never_saw(tiny, tmp_path, source, line, says):
    cache, summary = tiny
    done = _why(cache, tmp_path, source, line)
    assert done.returncode == 2 and done.stdout == ""
    assert " ".join(done.stderr.split()) == "error: " + says.format(run=summary["run_id"])


# -- the demo data through ingest and c2c: every row accounted for ---------------------------------------------------


@pytest.fixture(scope="module")
def demo(prefect_harness, tmp_path_factory):
    from flows.pipelines.c2c import c2c_flow
    from flows.pipelines.ingest import ingest_flow

    data, cache = tmp_path_factory.mktemp("demo-data"), tmp_path_factory.mktemp("demo-cache")
    paths, bad = write_demo(data, seed=4, bitext_rows=600, mono_rows=200, labeled_rows=200, slots_rows=400, test_rows=50)
    with open(paths.slots, "a", encoding="utf-8") as f:
        f.write(json.dumps(NO_SLOTS) + "\n")  # line 401
    conf = load_profile(REPO / "conf" / "demo.yaml", C2C_SETS, cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})
    return cache, paths, bad, ingest_flow(conf, profile="test"), c2c_flow(conf, profile="test")


def test_dropped_accounts_for_every_row_of_every_stage_on_the_demo(demo):
    cache, paths, bad, ingest, c2c = demo
    rows = {(r["dataset"], r["stage"]): r for r in catalog_rows(cache, _cookbook_accounting_query())}
    stages = {(s["stage"], s["dataset"]): s for s in ingest["stages"]}
    datasets = {ds for _, ds in stages if ds}  # (across_datasets has none: tasks/ingest/across.py)
    assert {k for k in rows if k[1] in ("read", "clean")} == {(ds, st) for ds in datasets for st in ("read", "clean")}
    for ds in datasets:
        read, clean = rows[(ds, "read")], rows[(ds, "clean")]
        assert read["input_rows"] == stages[("read", ds)]["rows_in"] == read["kept"] + read["rejected"]
        assert (read["kept"], read["rejected"], read["dropped"]) == (
            stages[("read", ds)]["rows_out"]["part"],
            stages[("read", ds)]["rows_out"]["rejects"],
            0,
        )
        assert clean["input_rows"] == read["kept"]  # clean reads what read kept
        # the summary counts each row once: what clean drops as a copy, a near duplicate or a test overlap is the
        # duplicates and across_datasets stages' rows (tasks/ingest/across.py COUNTED_BEFORE)
        earlier = catalog_rows(
            cache,
            "SELECT count(*) AS n FROM dropped WHERE source = $s AND stage = 'clean' "
            "AND reason IN ('duplicate', 'near_duplicates', 'test_overlap')",
            {"s": ds},
        )[0]["n"]
        assert stages[("clean", ds)]["rows_in"] == read["kept"] - earlier
        assert stages[("clean", ds)]["kept"] + stages[("clean", ds)]["dropped"] == read["kept"] - earlier
        assert (clean["kept"], clean["dropped"]) == (
            stages[("clean", ds)]["rows_out"]["part"],
            stages[("clean", ds)]["rows_out"]["dropped"],
        )
        kept = catalog_rows(
            cache,
            "SELECT (SELECT count(*) FROM bitext WHERE source = $s) + (SELECT count(*) FROM mono WHERE "
            "source = $s) + (SELECT count(*) FROM labeled WHERE source = $s) + (SELECT count(*) FROM "
            "slots WHERE source = $s) + (SELECT count(*) FROM heldout_bitext WHERE source = $s) + (SELECT "
            "count(*) FROM heldout_labeled WHERE source = $s) + (SELECT count(*) FROM heldout_slots WHERE "
            "source = $s) AS n",  # a held-out set's rows are in its heldout_* view (issue 47)
            {"s": ds},
        )[0]["n"]
        assert kept == clean["kept"]
    assert rows[("demo_bitext", "read")]["input_rows"] == paths.train_src.read_bytes().count(b"\n") == 600
    assert rows[("demo_bitext", "clean")]["dropped"] > 0  # the demo's duplicates and long pairs
    # c2c: delexicalise reads clean's kept slots (a malformed BIO row rejected, the planted row dropped), and
    # c2c_select every fold's generated rows
    delex, select = rows[("demo_slots", "delexicalise")], rows[("demo_slots", "c2c_select")]
    assert delex["input_rows"] == rows[("demo_slots", "clean")]["kept"]
    assert (delex["rejected"], delex["dropped"]) == (c2c["c2c"]["malformed_bio"], c2c["c2c"]["no_slots"]) == (0, 1)
    generated = sum(s["rows_out"]["part"] for s in c2c["stages"] if s["stage"] == "c2c_generate")
    assert select["input_rows"] == generated == c2c["c2c"]["generated"]
    assert select["dropped"] == sum(c2c["c2c"]["dropped"].values()) > 0
    reasons = {
        r["reason"]: r["n"]
        for r in catalog_rows(cache, "SELECT reason, count(*) AS n FROM dropped WHERE stage = 'c2c_select' GROUP BY ALL")
    }
    assert reasons == c2c["c2c"]["dropped"]


def test_why_follows_a_demo_row_into_views_and_to_the_stage_that_dropped_it(demo, tmp_path):
    cache, _, _, ingest, c2c = demo
    done = _why(cache, tmp_path, "demo_slots", "401")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "  tokens: hello there",
        "  tags: O O",  # issue 26: the row's text
        f"  read: kept  (run {ingest['run_id']})",  # c2c's read was cached
        f"  delexicalise: dropped, no_slots  (run {c2c['run_id']})",
        "  in views: slots",
    ]
    kept = catalog_rows(cache, "SELECT line FROM delexicalised WHERE source = 'demo_slots' ORDER BY line LIMIT 1")[0]["line"]
    done = _why(cache, tmp_path, "demo_slots", str(kept))
    assert done.returncode == 0 and "dropped" not in done.stdout
    views = next(line for line in done.stdout.splitlines() if line.startswith("  in views: ")).split(": ")[1]
    assert {"slots", "delexicalised"} <= set(views.split(", "))

"""No training input holds a held-out line (issue 47, defects 1 and 7): held-out sets live in `heldout_*` views,
every arm's mix is checked against them before a student trains, and a minimal `[ingest, train_nmt]` profile's
first night runs train_nmt after ingest. The nights through the CLI: tests/e2e/test_heldout_guard_cli.py."""

from __future__ import annotations

import json

import pyarrow as pa

from flows.engine import registry
from flows.pipelines.heldout import without_overlaps
from storage.sql_guard import tables_read
from tasks.ingest.heldout_overlap import OVERLAPS, heldout_overlaps

TEST = pa.table(
    {"src": ["Anna sleeps.", "the red dog runs fast"], "tgt": ["Anna schläft.", "der rote Hund rennt schnell"], "line": [1, 2]}
)


def test_heldout_overlaps_finds_normalised_copies_and_near_duplicates_once_per_distinct_row():
    rows = pa.table(
        {
            "src": ["anna sleeps", "a cat", "anna sleeps", "the red dog runs fast!", "the red dog runs faster"],
            "tgt": ["x", "eine katze", "x", "y", "der rote hund rennt schnell"],
        }
    )
    found = heldout_overlaps(rows, ("src", "tgt"), {"t": (TEST, ("src", "tgt"))}, threshold=0.8)
    assert found.schema == OVERLAPS
    assert found.to_pylist() == [
        {
            "row": 0,
            "side": "src",
            "text": "anna sleeps",
            "heldout": "t",
            "heldout_line": 1,
            "heldout_text": "Anna sleeps.",
            "jaccard": 1.0,
        },
        {
            "row": 3,
            "side": "src",
            "text": "the red dog runs fast!",
            "heldout": "t",
            "heldout_line": 2,
            "heldout_text": "the red dog runs fast",
            "jaccard": 1.0,
        },
        # sides in order, as decontaminate: src "faster" vs "fast" shares 17 of 19 character 5-grams, before tgt's equal
        {
            "row": 4,
            "side": "src",
            "text": "the red dog runs faster",
            "heldout": "t",
            "heldout_line": 2,
            "heldout_text": "the red dog runs fast",
            "jaccard": 0.8947,
        },
    ]  # row 2 repeats row 0 (an arm's copies): counted once; row 1 reaches nothing
    exact = heldout_overlaps(rows, ("src", "tgt"), {"t": (TEST, ("src", "tgt"))}, threshold=1.0)  # equal lines only
    assert list(zip(exact["row"].to_pylist(), exact["side"].to_pylist(), strict=True)) == [(0, "src"), (3, "src"), (4, "tgt")]


def test_without_overlaps_leaves_out_each_overlapping_row_and_its_copies_and_keeps_allowed_sets():
    """heldout.on_overlap: drop: the rows found (a distinct pair once) and their copies go to role dropped, in input
    order, with the first set and line found; a set named in allow_overlap keeps its rows."""
    rows = pa.table(
        {
            "src": ["anna sleeps", "a cat", "anna sleeps", "the red dog runs faster", "a cat"],
            "tgt": ["x", "eine katze", "x", "der rote hund rennt schnell", "eine katze"],
            "source": ["p", "b", "p", "p", "b"],
        }
    )
    found = heldout_overlaps(rows, ("src", "tgt"), {"t": (TEST, ("src", "tgt"))}, threshold=0.8)
    out = without_overlaps(rows, found, allowed=[])
    assert out["part"].to_pylist() == [rows.to_pylist()[1], rows.to_pylist()[4]]
    assert out["dropped"].to_pylist() == [
        {"src": "anna sleeps", "tgt": "x", "source": "p", "reason": "test_overlap", "detail": "t line 1 (src, Jaccard 1.00)"},
        {"src": "anna sleeps", "tgt": "x", "source": "p", "reason": "test_overlap", "detail": "t line 1 (src, Jaccard 1.00)"},
        {
            "src": "the red dog runs faster",
            "tgt": "der rote hund rennt schnell",
            "source": "p",
            "reason": "test_overlap",
            "detail": "t line 2 (src, Jaccard 0.89)",
        },
    ]
    assert without_overlaps(rows, found, allowed=["t"]) == {"part": rows}


def test_tables_read_parses_the_views_a_query_reads_without_binding_it():
    assert tables_read("WITH t AS (SELECT * FROM bitext) SELECT src, tgt FROM t JOIN rejuvenated USING (uid)") == {
        "bitext",
        "rejuvenated",
    }
    assert tables_read("SELECT * FROM read_parquet('nowhere/*.parquet')") == set()
    assert tables_read("SELEC src FROM bitext") == set()  # does not parse: the mix's own run says why


def test_a_mix_over_a_dataset_view_orders_train_nmt_after_ingest_issue_47():
    from conf.loader import load_profile

    arm = json.dumps({"all": {"mix": {"all": "SELECT src, tgt FROM bitext"}}})
    conf = load_profile("demo", ["pipelines=[train_nmt, ingest]", f"train_nmt.experiments={arm}", "train_nmt.baseline=all"])
    assert registry.depends(["train_nmt", "ingest"]) == {"train_nmt": [], "ingest": []}  # the entries' reads alone
    assert registry.depends(conf.pipelines, conf) == {"train_nmt": ["ingest"], "ingest": []}

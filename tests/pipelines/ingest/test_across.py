"""The filters across datasets (tasks/ingest/across.py, issue 28): decontaminate drops a training row that is a held-out
line after normalising (or within the Jaccard threshold of one) and keeps a similar-but-different one; near_duplicates
keeps the first by (source, line) across datasets, comparing only rows the chain kept; the held-out set is never
filtered; `drop_across` makes a dataset's `clean` of its chain's and the stage's drops, every row accounted for."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from conf.sections.filters import DecontaminateConf, NearDuplicatesConf
from storage.parts import Parts
from tasks.ingest import near_duplicates as N
from tasks.ingest.across import DROPS, across_datasets, drop_across, overlaps, side_name
from tests.conftest import bitext

FENCE = "a small boy in a red jacket is climbing over the wooden fence"
ZAUN = "ein kleiner junge in einer roten jacke klettert über den holzzaun"
COFFEE = ("Two women are drinking coffee at a small table outside a cafe.", "Zwei Frauen trinken Kaffee vor einem Café.")
PARK = ("The old man reads a newspaper on a bench in the park.", "Der alte Mann liest eine Zeitung auf einer Bank im Park.")
DOG = ("A dog, running on the beach!", "Ein Hund, der am Strand läuft!")


def marked(pairs: list[tuple[str, str]], source: str, reasons: dict[int, str] | None = None) -> pa.Table:
    """A bitext as its filter_chain leaves it: ``reason``/``detail`` null but for the lines of ``reasons``."""
    rows = bitext(pairs, source=source)
    why = [(reasons or {}).get(line) for line in rows["line"].to_pylist()]
    return rows.append_column("reason", pa.array(why, pa.string())).append_column("detail", pa.array(why, pa.string()))


def run(datasets: dict[str, pa.Table], tests: dict[str, pa.Table], **filters) -> pa.Table:
    near, clean = filters.get("near_duplicates"), filters.get("decontaminate")
    with tempfile.TemporaryDirectory(prefix="augdag-test-across-") as parts:  # the sides' Parquet, removed after
        sides = {side_name(n): Parts.of_tables([t], Path(parts) / n) for n, t in {**datasets, **tests}.items()}
        return across_datasets(
            kinds=dict.fromkeys([*datasets, *tests], "bitext"),
            decontaminate=clean,
            decontaminate_sets=list(datasets) if clean else [],
            test_sets=list(tests),
            near_duplicates=near,
            near_duplicate_sets=list(datasets) if near else [],
            **sides,
        )


A = [
    (FENCE, ZAUN),  # a:1
    COFFEE,  # a:2
    ("the cat sleeps on the warm windowsill", "die katze schläft auf der warmen fensterbank"),  # a:3, the chain dropped it
    DOG,  # a:4
]
B = [
    (FENCE.replace("wooden", "woolen"), ZAUN),  # b:1: one letter from a:1
    ("the cat sleeps on the warm windowsill", "die katze schläft auf der warmen fensterbank"),  # b:2: a:3 is no kept row
    ("a dog running on the beach", "ein hund der am strand läuft"),  # b:3: a:4 after normalising
    (FENCE.replace("boy", "girl"), ZAUN.replace("junge", "mädchen")),  # b:4: similar to a:1, below 0.8
]


def test_near_duplicates_keep_the_first_by_source_and_line_across_datasets_with_exact_details():
    a, b = marked(A, "a", {3: "language_id"}), marked(B, "b")
    fence = N.jaccard(*(N.shingles(N.normalise(f"{s}\t{t}")) for s, t in (A[0], B[0])))
    girl = N.jaccard(*(N.shingles(N.normalise(f"{s}\t{t}")) for s, t in (A[0], B[3])))
    assert (round(fence, 4), round(girl, 4)) == (0.9194, 0.7464)  # a pair compares as its two sides joined
    drops = run({"b": b, "a": a}, {}, near_duplicates=NearDuplicatesConf())  # in any order: by (source, line)
    assert drops.schema == DROPS
    assert [tuple(r.values()) for r in drops.to_pylist()] == [
        ("b", 1, None, "near_duplicates", "near_duplicate_of=a:1 jaccard=0.9194"),
        ("b", 3, None, "near_duplicates", "near_duplicate_of=a:4 jaccard=1"),
    ]
    swapped = run({"a": marked(B, "a"), "b": marked(A, "b", {3: "language_id"})}, {}, near_duplicates=NearDuplicatesConf())
    assert [(r["source"], r["line"], r["detail"]) for r in swapped.to_pylist()] == [
        ("b", 1, "near_duplicate_of=a:1 jaccard=0.9194"),  # the original fence goes, the edited one is first
        ("b", 4, "near_duplicate_of=a:3 jaccard=1"),  # b:3 (the chain dropped it) is no kept row: a:3 is the first
    ]


def test_decontaminate_drops_a_normalised_copy_of_a_test_line_and_keeps_a_similar_one():
    similar = ("The old woman reads a newspaper on a bench in the park.", "Die alte Frau liest eine Zeitung im Park.")
    near = ("A tall man reads a magazine.", PARK[1].replace("Park", "Parks"))  # the target within 0.8 of the test one
    train = marked(
        [
            (PARK[0].lower().replace(",", "").rstrip(".") + " ", "Ein ganz anderer Satz."),  # t:2 after normalising
            similar,
            near,
            DOG,
            ("coffee", COFFEE[1].upper()),  # the target side: t:1's after case folding
        ],
        "train",
    )
    test = bitext([COFFEE, PARK], source="t")
    parks = N.jaccard(*(N.shingles(N.normalise(x)) for x in (PARK[1], near[1])))
    woman = N.jaccard(*(N.shingles(N.normalise(x)) for x in (PARK[0], similar[0])))
    assert (round(parks, 4), round(woman, 4)) == (0.9804, 0.8148)
    drops = run({"train": train}, {"t": test}, decontaminate=DecontaminateConf(threshold=0.85))
    assert [(r["line"], r["reason"], r["detail"]) for r in drops.to_pylist()] == [
        (1, "test_overlap", "test_overlap=t:2 side=src jaccard=1"),
        (3, "test_overlap", "test_overlap=t:2 side=tgt jaccard=0.9804"),
        (5, "test_overlap", "test_overlap=t:1 side=tgt jaccard=1"),
    ]  # line 2 (0.8148 < 0.85) and line 4 are kept; no row of the test set is ever in the drops
    exact_only = run({"train": train}, {"t": test}, decontaminate=DecontaminateConf(threshold=1.0))
    assert exact_only["line"].to_pylist() == [1, 5]


def test_decontaminate_runs_before_near_duplicates_so_a_kept_row_is_never_a_test_line():
    tgt = "Zwei Frauen trinken Kaffee an einem kleinen Tisch vor einem Café in der Altstadt."
    men = "Two men are drinking coffee at a small table outside a bar."  # within 0.8 of line 1 as a pair, not of t:1
    assert (round(N.jaccard(*(N.shingles(N.normalise(x)) for x in (COFFEE[0], men))), 4)) == 0.7344
    train = marked([(COFFEE[0], tgt), (men, tgt)], "a")
    test = {"t": bitext([(COFFEE[0], "Etwas ganz anderes.")], source="t")}
    near = run({"a": train}, {}, near_duplicates=NearDuplicatesConf())
    assert [(r["line"], r["detail"]) for r in near.to_pylist()] == [(2, "near_duplicate_of=a:1 jaccard=0.8264")]
    both = run({"a": train}, test, decontaminate=DecontaminateConf(), near_duplicates=NearDuplicatesConf())
    assert [(r["line"], r["detail"]) for r in both.to_pylist()] == [(1, "test_overlap=t:1 side=src jaccard=1")]


def test_overlaps_matches_the_sides_in_order_and_no_empty_line():
    pool = pa.array(["", "Hello, World!", "guten tag"])
    hit, side, score = overlaps(pool, [pa.array(["", "x", "HELLO world"]), pa.array(["", "Guten Tag.", "hello world"])])
    assert (hit.tolist(), side.tolist(), score.tolist()) == ([-1, 2, 1], [0, 1, 0], [0.0, 1.0, 1.0])


def test_drop_across_keeps_the_rest_and_drops_with_the_chain_s_reason_first():
    rows = marked([("a", "x"), ("b", "y"), ("c", "z"), ("d", "w")], "a", {2: "language_id"})
    drops = pa.Table.from_arrays(
        [["a", "other"], [3, 4], [None, None], ["near_duplicates", "test_overlap"], ["near_duplicate_of=a:1 jaccard=1", "x"]],
        schema=DROPS,
    )
    out = drop_across(rows, drops)
    assert out["part"]["line"].to_pylist() == [1, 4] and out["part"].schema == bitext([]).schema
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "language_id", "detail": "language_id"},
        {"line": 3, "reason": "near_duplicates", "detail": "near_duplicate_of=a:1 jaccard=1"},
    ]
    assert pc.sum(pc.is_null(out["dropped"]["reason"])).as_py() == 0

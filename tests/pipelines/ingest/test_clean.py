import pyarrow as pa
import pyarrow.parquet as pq

from storage.parts import Parts
from tasks.ingest.clean import CLEAN, clean, find_duplicates
from tests.conftest import bitext


def _shards(tmp_path, *tables):
    paths = []
    for i, t in enumerate(tables):
        paths.append(tmp_path / f"part-{i:05d}.parquet")
        pq.write_table(t, paths[-1])
    return Parts(tuple(paths))


def test_duplicates_across_shards_keep_the_first_occurrence(tmp_path):
    a = bitext([("a b", "x y"), ("c d", "z w"), ("a b", "x y")], first_line=1)
    b = bitext([("c d", "z w"), ("e f", "u v"), ("a b", "x y")], first_line=4)
    dups = find_duplicates(_shards(tmp_path, a, b))
    assert dups.select(["first_line", "copies"]).to_pylist() == [{"first_line": 1, "copies": 3}, {"first_line": 2, "copies": 2}]
    kept_a, kept_b = (clean(t, dups, kind="bitext")["part"] for t in (a, b))
    assert kept_a["line"].to_pylist() == [1, 2] and kept_b["line"].to_pylist() == [5]
    dropped_b = clean(b, dups, kind="bitext")["dropped"]
    assert dropped_b.select(["line", "reason"]).to_pylist() == [
        {"line": 4, "reason": "duplicate"},
        {"line": 6, "reason": "duplicate"},
    ]


def test_duplicates_same_text_other_source_is_not_a_duplicate(tmp_path):
    a, b = bitext([("a b", "x y")], source="one"), bitext([("a b", "x y")], source="two", first_line=2)
    assert find_duplicates(_shards(tmp_path, a, b)).num_rows == 0


def test_clean_filters_tokens_and_ratio_with_thesis_defaults_and_keeps_every_row_accounted():
    pairs = [
        ("one two three", "eins zwei drei"),  # kept
        ("", "leer"),  # 0 tokens < 1
        ("a " * 251, "b " * 251),  # 251 tokens > 250
        ("a b c d", "w x"),  # ratio 2.0 > 1.5
        ("a b c", "w x"),  # ratio 1.5: kept (not above)
        ("a  b\tc", "x y z"),  # whitespace runs: 3 vs 3 tokens, kept
        ("a b", "x y z w"),  # ratio 2.0 the other way
    ]
    rows = bitext(pairs)
    out = clean(rows, pa.table({"uid": pa.array([], pa.string()), "first_line": pa.array([], pa.int64())}), kind="bitext")
    assert out["part"]["line"].to_pylist() == [1, 5, 6]
    assert out["dropped"].select(["line", "reason"]).to_pylist() == [
        {"line": 2, "reason": "too_few_tokens"},
        {"line": 3, "reason": "too_many_tokens"},
        {"line": 4, "reason": "length_ratio"},
        {"line": 7, "reason": "length_ratio"},
    ]
    assert out["part"].num_rows + out["dropped"].num_rows == rows.num_rows
    assert out["part"].schema == rows.schema


def test_clean_parameters_change_the_outcome():
    rows = bitext([("a b c d", "w x"), ("a", "b")])
    empty = pa.table({"uid": pa.array([], pa.string()), "first_line": pa.array([], pa.int64())})
    assert clean(rows, empty, kind="bitext", max_ratio=2.0)["part"].num_rows == 2
    assert clean(rows, empty, kind="bitext", min_tokens=2, max_ratio=2.0)["part"]["line"].to_pylist() == [1]
    assert clean(rows, empty, kind="bitext", max_tokens=3, max_ratio=2.0)["part"]["line"].to_pylist() == [2]


def test_clean_mono_and_slots_count_their_own_fields():
    mono = pa.table(
        {"uid": ["u1", "u2"], "text": ["a b c", "a " * 300], "source": ["m", "m"], "line": pa.array([1, 2], pa.int64())}
    )
    empty = pa.table({"uid": pa.array([], pa.string()), "first_line": pa.array([], pa.int64())})
    assert clean(mono, empty, kind="mono")["dropped"]["reason"].to_pylist() == ["too_many_tokens"]
    slots = pa.table(
        {
            "uid": ["s1", "s2"],
            "tokens": [["fly", "to", "paris"], []],
            "tags": [["O", "O", "B-city"], []],
            "source": ["s", "s"],
            "line": pa.array([1, 2], pa.int64()),
        }
    )
    assert clean(slots, empty, kind="slots")["part"]["uid"].to_pylist() == ["s1"]


def test_keep_valid_keeps_every_row_in_order_and_drops_none_with_cleans_columns(tmp_path):
    from tasks.ingest.clean import KEEP_VALID, keep_valid

    rows = bitext([("a b", "x y"), ("a b", "x y"), ("yes", "one two three four five six")])  # a copy, ratio 6
    out = keep_valid(rows, cleans=False)
    assert out["part"].equals(rows) and out["dropped"].num_rows == 0
    assert out["dropped"].column_names == [*rows.column_names, "reason", "detail"]
    assert clean(rows, find_duplicates(_shards(tmp_path, rows)), kind="bitext")["part"]["line"].to_pylist() == [1]
    assert (KEEP_VALID.name, KEEP_VALID.version) == ("clean", CLEAN.version)  # one stage for the view, either way
    assert KEEP_VALID.bind({"cleans": False}, n_inputs=1).model_dump(mode="json", exclude_unset=True) == {
        "cleans": False
    }  # the fingerprint's params say it does not clean


def test_dataset_clean_replaces_only_the_keys_a_dataset_gives_and_false_is_no_cleaning():
    from conf.sections.cleaning import CleanConf, CleanOverride, dataset_clean

    section = CleanConf(max_ratio=2.0, max_tokens=80)
    assert dataset_clean(section, None) is section
    assert dataset_clean(section, False) is None
    own = dataset_clean(section, CleanOverride(max_ratio=9, dedup=False))
    assert own == CleanConf(dedup=False, min_tokens=1, max_tokens=80, max_ratio=9.0)

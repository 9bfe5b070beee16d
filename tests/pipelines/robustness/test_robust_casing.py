"""UpperCase and TitleCase (tasks/robustness/casing.py) on hand-written pairs: exact outputs, lineage, p = 0 and
p = 1, the share at p = 0.1, and a row's output whatever its shard."""

from __future__ import annotations

import json

import pyarrow as pa
from robustness_helpers import make_pairs, many, within_3_se

from tasks.robustness.casing import python_only, title, title_case, upper, upper_case
from tasks.robustness.rows import ROBUST_BITEXT, row_uid

SRC = ["Two dogs run.", "THE END", "die  Straße\tist groß", "123 !", "ŉ ǆ ß"]
TGT = ["Zwei Hunde rennen.", "DAS ENDE", "the street is big", "123 !", "x"]


def test_upper_case_at_p_1_changes_every_row_with_a_lower_case_letter():
    rows = make_pairs(SRC, TGT, ["0-0 1-1 2-2", "0-0", None, "", "0-0"])
    out = upper_case(rows, p=1.0, seed=0)
    assert out.schema == ROBUST_BITEXT
    assert out["src"].to_pylist() == ["TWO DOGS RUN.", "DIE  STRASSE\tIST GROSS", "ʼN Ǆ SS"]  # Python's full mapping
    assert out["tgt"].to_pylist() == ["ZWEI HUNDE RENNEN.", "THE STREET IS BIG", "X"]
    assert out["links"].to_pylist() == ["0-0 1-1 2-2", None, "0-0"]  # no word moves
    uids = rows["uid"].to_pylist()
    assert out["parent_uid"].to_pylist() == [uids[0], uids[2], uids[4]]
    assert out["parents"].to_pylist() == [[uids[0]], [uids[2]], [uids[4]]]
    assert out["line"].to_pylist() == [1, 3, 5] and set(out["source"].to_pylist()) == {"t"}
    assert set(out["modifier"].to_pylist()) == {"UpperCase"} and json.loads(out["params"][0].as_py()) == {"p": 1.0}
    first = out.slice(0, 1).to_pylist()[0]
    assert first["uid"] == row_uid("UpperCase", '{"p": 1.0}', [uids[0]], first["src"], first["tgt"])


def test_title_case_joins_words_with_single_spaces_and_upper_cases_their_first_letter():
    out = title_case(make_pairs(SRC, TGT), p=1.0, seed=0)
    assert out["src"].to_pylist() == ["Two Dogs Run.", "Die Straße Ist Groß", "ʼN Ǆ SS"]
    assert out["tgt"].to_pylist() == ["Zwei Hunde Rennen.", "The Street Is Big", "X"]
    assert out["line"].to_pylist() == [1, 3, 5]  # "THE END" and "123 !" are title case already


def test_arrow_casing_equals_python_on_every_special_character():
    specials = python_only()[1:-1].replace("\\", "")
    text = pa.array([c + "a" + c for c in specials] + ["ß", "  a\x1cb\u3000c  ", "", "ǅx"])
    assert upper(text).to_pylist() == [s.upper() for s in text.to_pylist()]
    assert title(text).to_pylist() == [" ".join(w[0].upper() + w[1:] for w in s.split()) for s in text.to_pylist()]


def test_p_0_changes_nothing():
    rows = many(2000)
    assert upper_case(rows, p=0.0).num_rows == 0 and title_case(rows, p=0.0).num_rows == 0


def test_the_share_at_p_01_is_within_3_standard_errors():
    rows = many(10_000)
    assert within_3_se(upper_case(rows, p=0.1, seed=1).num_rows, 10_000, 0.1)
    assert within_3_se(title_case(rows, p=0.1, seed=1).num_rows, 10_000, 0.1)  # every row has a lower-case word


def test_the_same_seed_gives_the_same_rows_and_another_seed_others():
    rows = many(3000)
    a, b, c = (upper_case(rows, p=0.1, seed=s)["parent_uid"].to_pylist() for s in (5, 5, 6))
    assert a == b and a != c


def test_a_row_comes_out_the_same_whatever_its_shard():
    rows = many(3000)
    whole = upper_case(rows, p=0.2, seed=2)
    shards = pa.concat_tables(upper_case(rows.slice(a, 700), p=0.2, seed=2) for a in range(0, 3000, 700))
    assert shards.equals(whole)

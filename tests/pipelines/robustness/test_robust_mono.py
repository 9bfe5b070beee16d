"""robust_mono (tasks/robustness/mono.py): the one-sided modifiers over monolingual sentences, each sentence read as a
pair whose target is a copy of it; the others of the list are left to the bitext."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from storage.schemas import MONO, with_uid
from tasks.robustness.mono import ROBUST_MONO, robust_text
from tasks.robustness.spec import parse_modifiers

TEXTS = ["the cat sleeps.", "A DOG RUNS", "where is it?!", "hello world"]


def mono(texts: list[str]) -> pa.Table:
    n = len(texts)
    rows = pa.table(
        {"uid": pa.nulls(n, pa.string()), "text": texts, "source": ["m"] * n, "line": list(range(1, n + 1))}, schema=MONO
    )
    return with_uid(rows, "mono")


def test_casing_and_end_punctuation_at_p_1_change_every_row_they_can_and_nothing_else():
    rows = mono(TEXTS)
    out = robust_text(rows, modifiers=[{"UpperCase": 1.0}, {"TitleCase": 1.0}, {"RemoveEndPunct": 1.0}])
    assert out.schema == ROBUST_MONO
    got = [(r["modifier"], r["line"], r["text"]) for r in out.to_pylist()]
    assert got == [
        ("UpperCase", 1, "THE CAT SLEEPS."),
        ("UpperCase", 3, "WHERE IS IT?!"),
        ("UpperCase", 4, "HELLO WORLD"),
        ("TitleCase", 1, "The Cat Sleeps."),
        ("TitleCase", 3, "Where Is It?!"),
        ("TitleCase", 4, "Hello World"),
        ("RemoveEndPunct", 1, "the cat sleeps"),  # "?!": two marks, left as it is (OpusTrainer's rule)
    ]
    uids = rows["uid"].to_pylist()
    first = out.to_pylist()[0]
    assert first["parent_uid"] == uids[0] and first["source"] == "m"
    assert first["uid"] == hashlib.md5("\x1f".join(["UpperCase", '{"p": 1.0}', uids[0], "THE CAT SLEEPS."]).encode()).hexdigest()
    assert json.loads(first["params"]) == {"p": 1.0}


def test_p_0_changes_nothing_and_the_two_sided_modifiers_are_left_to_the_bitext():
    rows = mono(TEXTS)
    assert robust_text(rows, modifiers=[{"UpperCase": 0.0}, {"Typos": 0.0}]).num_rows == 0
    two_sided = [{"Noise": 1.0}, {"Merge": 1.0}, {"Prefix": 1.0}, {"Tags": 1.0}]
    assert robust_text(rows, modifiers=two_sided).num_rows == 0
    assert robust_text(rows, modifiers=[*two_sided, {"UpperCase": 1.0}])["modifier"].to_pylist() == ["UpperCase"] * 3


def test_a_sentences_typos_are_its_pairs_source_side_typos_with_the_same_uid():
    """Typos draw by (seed, uid, modifier) and touch the source only: a sentence gets exactly the typos the source of a
    pair with its uid gets."""
    rows = mono([f"sentence number {i} with several words in it" for i in range(200)])
    out = robust_text(rows, seed=7, modifiers=[{"Typos": 0.5}])
    pairs = pa.table({"uid": rows["uid"], "src": rows["text"], "tgt": pa.array(["x"] * rows.num_rows)})
    (spec,) = parse_modifiers([{"Typos": 0.5}])
    expected = spec.apply(pairs, seed=7)
    assert out.num_rows > 0
    assert out["parent_uid"].to_pylist() == expected["parent_uid"].to_pylist()
    assert out["text"].to_pylist() == expected["src"].to_pylist()


def test_a_profile_whose_mono_list_gets_no_one_sided_modifier_or_names_a_bitext_is_one_error_at_its_line(tmp_path):
    import pytest

    from conf.errors import ConfError
    from conf.loader import load_profile

    for name in ("x.en", "x.de", "m.txt"):
        (tmp_path / name).write_text("a b\n")
    head = (
        "pipelines: [robustness]\n"
        "datasets:\n"
        f"  pair: {{kind: bitext, format: text, src: {tmp_path}/x.en, tgt: {tmp_path}/x.de}}\n"
        f"  news: {{kind: mono, format: text, path: {tmp_path}/m.txt}}\n"
        "robustness:\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(head + "  mono: [news]\n  modifiers:\n    - Tags: 0.1\n    - Merge: 0.1\n")
    with pytest.raises(ConfError) as e:
        load_profile(profile, [], cache=tmp_path / "c")
    assert str(e.value) == (
        f"{profile}:6: robustness.mono: none of robustness.modifiers (Tags, Merge) changes one sentence on its own; "
        "the monolingual datasets take UpperCase, TitleCase, Typos, RemoveEndPunct"
    )
    profile.write_text(head + "  mono: [pair]\n  modifiers:\n    - UpperCase: 0.1\n")
    with pytest.raises(ConfError) as e:
        load_profile(profile, [], cache=tmp_path / "c")
    assert str(e.value).startswith(f"{profile}:6: robustness.mono.0: dataset 'pair' must be of kind 'mono', found kind 'bitext'")

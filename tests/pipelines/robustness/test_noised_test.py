"""Noised test sets (issue 30): every pair of a held-out bitext kept, the modifiers applied in order, the reference
changed only by the modifiers defined on both sides; the profile's train_nmt.tests entries checked when it loads."""

from __future__ import annotations

import pytest

from conf.loader import load_profile
from conf.sections.experiments import NoisedTest, TrainNMTConf
from tasks.robustness.stage import noised_pairs
from tests.conftest import REPO
from tests.pipelines.robustness.robustness_helpers import make_pairs, many

SRC = ["the dog runs .", "a cat sleeps !", "12 34", "we eat fish ."]
TGT = ["der Hund rennt .", "eine Katze schläft !", "12 34", "wir essen Fisch ."]


def test_upper_case_at_1_changes_both_sides_of_every_pair_and_keeps_uid_and_line():
    rows = make_pairs(SRC, TGT)
    out = noised_pairs(rows, modifiers=[{"UpperCase": 1.0}])
    assert out.schema == rows.schema and out["uid"] == rows["uid"] and out["line"] == rows["line"]
    assert out["src"].to_pylist() == [s.upper() for s in SRC] and out["tgt"].to_pylist() == [t.upper() for t in TGT]


def test_typos_change_the_source_only_and_an_unchanged_pair_stays():
    rows = many(200)
    out = noised_pairs(rows, seed=3, modifiers=[{"Typos": 1.0, "char_swap": 1.0}])
    assert out.num_rows == rows.num_rows and out["tgt"] == rows["tgt"]  # the reference is never given typos
    changed = sum(a != b for a, b in zip(out["src"].to_pylist(), rows["src"].to_pylist(), strict=True))
    assert 0.9 * rows.num_rows < changed < rows.num_rows  # a swap of two equal characters ("ll") changes nothing
    assert noised_pairs(rows, seed=3, modifiers=[{"Typos": 0.0}]) == rows  # p = 0: the set as it is


def test_modifiers_apply_in_order_each_to_the_previous_result():
    rows = make_pairs(SRC, TGT)
    out = noised_pairs(rows, modifiers=[{"RemoveEndPunct": 1.0}, {"UpperCase": 1.0}])
    assert out["src"].to_pylist() == ["THE DOG RUNS", "A CAT SLEEPS", "12 34", "WE EAT FISH"]
    assert out["tgt"].to_pylist() == ["DER HUND RENNT", "EINE KATZE SCHLÄFT", "12 34", "WIR ESSEN FISCH"]


def test_the_label_and_a_list_or_one_mapping_of_modifiers():
    one = NoisedTest.model_validate({"dataset": "t", "modifiers": {"UpperCase": 1.0}})
    two = NoisedTest.model_validate({"dataset": "t", "modifiers": [{"Typos": 0.1}, {"TitleCase": 1.0}], "name": "t-noisy"})
    assert (one.label, one.entries()) == ("t+UpperCase", [{"UpperCase": 1.0}])
    assert (two.label, two.entries()) == ("t-noisy", [{"Typos": 0.1}, {"TitleCase": 1.0}])
    tn = TrainNMTConf.model_validate({"tests": ["t", {"dataset": "t", "modifiers": {"UpperCase": 1.0}}]})
    assert tn.test_datasets() == ["t", "t"]
    with pytest.raises(ValueError, match=r"tests: listed twice: \['t\+UpperCase'\]"):
        TrainNMTConf.model_validate({"tests": [{"dataset": "t", "modifiers": {"UpperCase": 1.0}}] * 2})


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            "{dataset: demo_test, modifiers: {Merge: 1.0}}",
            "train_nmt.tests.1.modifiers.0: Merge does not keep a test set's pairs one for one; a noised test set takes "
            "UpperCase, TitleCase, Typos, RemoveEndPunct",
        ),
        (
            "{dataset: demo_test, modifiers: [{UpperCase: 1.0}, {Typos: 0.1, swap: 1}]}",
            "train_nmt.tests.1.modifiers.1: Typos: swap is not a key of Typos; expected one of Typos, char_swap, "
            "missing_char, extra_char, nearby_char, similar_char, skipped_space, random_space, repeated_char, unichar",
        ),
        (
            "{dataset: demo_mono, modifiers: {UpperCase: 1.0}}",
            "train_nmt.tests[1]: dataset 'demo_mono' must be of kind 'bitext', found kind 'mono'; bitext datasets: "
            "['demo_bitext', 'demo_test']",
        ),
    ],
)
def test_a_wrong_noised_test_entry_is_one_line_naming_its_key(entry, message, tmp_path):
    from conf.errors import ConfError

    with pytest.raises(ConfError) as e:
        load_profile(REPO / "conf" / "demo.yaml", [f"train_nmt.tests=[demo_test, {entry}]"], cache=tmp_path)
    assert str(e.value).endswith(message), str(e.value)

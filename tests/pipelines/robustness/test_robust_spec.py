"""OpusTrainer's modifier list as typed specs (tasks/robustness/spec.py): names, defaults, the order of Typos kinds,
one-line errors naming the entry, the modifier and the key, and a spec running its stage."""

from __future__ import annotations

import pytest
from robustness_helpers import many

from conf.errors import ConfError
from tasks.robustness.spec import Merge, Tags, Typos, UpperCase, parse_modifiers
from tasks.robustness.typos import KINDS, typos


def test_the_issues_list_parses_with_opustrainers_defaults():
    specs = parse_modifiers(
        [{"UpperCase": 0.05}, {"Typos": 0.05, "char_swap": 0.1}, {"Tags": 0.02, "augment": 0.0}, {"Merge": 0.01}]
    )
    assert [type(s) for s in specs] == [UpperCase, Typos, Tags, Merge]
    assert specs[1].kwargs() == {"p": 0.05, "kinds": {"char_swap": 0.1}}  # naming a kind selects only it
    assert specs[2].kwargs() == {
        "p": 0.02,
        "augment": 0.0,
        "replace": 0.0,
        "tag": 1.0,
        "template": "__source__ {src} __target__ {trg} __done__",
    }
    assert specs[3].kwargs() == {"p": 0.01, "min_lines": 2, "max_lines": 4}


def test_typos_keeps_the_order_of_its_kinds_and_defaults_to_all_nine():
    spec = parse_modifiers([{"Typos": 0.1, "unichar": 0.2, "char_swap": 0.3}])[0]
    assert list(spec.kinds()) == ["unichar", "char_swap"]
    assert parse_modifiers([{"Typos": 0.1}])[0].kinds() == dict.fromkeys(KINDS, 0.1)


def test_remove_end_punctuation_is_read_under_both_names():
    names = {type(s).__name__ for s in parse_modifiers([{"RemoveEndPunct": 0.1}, {"RemoveEndPunctuation": 0.1}])}
    assert names == {"RemoveEndPunct"}


@pytest.mark.parametrize(
    "entries, message",
    [
        ([{"UpperCase": 1.5}], r"^modifiers\[0\] \(UpperCase\): UpperCase = 1.5: Input should be less than or equal to 1$"),
        (
            [{"UpperCase": 0.1}, {"Typos": 0.1, "char_swp": 0.1}],
            r"^modifiers\[1\] \(Typos\): char_swp is not a key of Typos; expected one of Typos, char_swap",
        ),
        ([{"Tags": 0.1, "custom_detok_src": "zh"}], r"custom_detok_src is OpusTrainer's but not supported here"),
        ([{"Tags": 0.1, "tag": 0.5, "augment": 0.3}], r"augment \+ replace \+ tag must reach 1.0"),
        ([{"Merge": 0.1, "min_lines": 5}], r"^modifiers\[0\] \(Merge\): min_lines 5 > max_lines 4$"),
        ([{"Noise": 0.1, "max_words": "x"}], r"max_words = 'x': Input should be a valid integer"),
        ([{"Shout": 0.1}], r"^modifiers\[0\]: unknown modifier 'Shout'; expected one of UpperCase, TitleCase"),
        ([3], r"^modifiers\[0\]: expected a mapping such as \{UpperCase: 0.05\}, found 3$"),
        ({"UpperCase": 0.1}, r"^modifiers: expected a list"),
    ],
)
def test_a_wrong_entry_is_one_conf_error_naming_it(entries, message):
    with pytest.raises(ConfError, match=message):
        parse_modifiers(entries)


def test_a_spec_runs_its_stage_with_its_parameters():
    rows = many(500)
    spec = parse_modifiers([{"Typos": 0.3, "repeated_char": 1.0}])[0]
    assert spec.apply(rows, seed=3).equals(typos(rows, p=0.3, seed=3, kinds={"repeated_char": 1.0}))

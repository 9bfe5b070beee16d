"""tasks/common/schedules.py and tasks/common/mix.py (issue 49, schedules as samplers): PCC's curriculum sampler, a
train_nmt arm as a Mix, EPiDA's selected samples, and train_classifier training with the same sampler (its recorded
batches). Against the tiny demo's own training: tests/pipelines/test_schedules_demo.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augdag.samplers import Curriculum, Mix, SelectedSamples
from conf.errors import ConfError, InputError
from tasks.train_classifier.classify import BATCHES, LOSSES, classifier_builder

PARAMS = {"levels": 2, "cycles": 2, "steps_per_level": 1, "batch_size": 5, "original_share": 0.2, "seed": 7}


def curriculum_rows() -> pa.Table:
    """4 originals o0..o3 (labels a, b), each with one paraphrase at level 1 and two at level 2 (ranks 1, 2, 3)."""
    rows = []
    for o in range(4):
        label = "ab"[o % 2]
        rows.append({"uid": f"o{o}", "parent_uid": f"o{o}", "text": f"sentence {o}", "label": label, "level": 0, "rank": 0})
        for rank, level in ((1, 1), (2, 2), (3, 2)):
            uid = f"o{o}-p{rank}"
            rows.append(
                {"uid": uid, "parent_uid": f"o{o}", "text": f"para {o} {rank}", "label": label, "level": level, "rank": rank}
            )
    return pa.Table.from_pylist([{**r, "copy": 0} for r in rows])


def levels_of(batches: list[pa.Table]) -> list[list[int]]:
    return [b["level"].to_pylist() for b in batches]


def test_curriculum_sampler_yields_the_levels_cyclic_in_order_with_the_original_share_alg_1():
    batches = list(Curriculum(curriculum_rows(), schedule="cyclic", **PARAMS))
    # (0, 1, 2) twice; per batch round(0.2 · 5) = 1 original, then 4 paraphrases of the step's level
    assert levels_of(batches) == [[0] * 5, [0, 1, 1, 1, 1], [0, 2, 2, 2, 2]] * 2
    for batch in batches:  # each paraphrase belongs to the original drawn at its position
        assert all(u.startswith(p) for u, p in zip(batch["uid"].to_pylist(), batch["parent_uid"].to_pylist()))


@pytest.mark.parametrize(
    ("schedule", "steps"),
    [("inverse_cyclic", [0, 1, 2, 2, 1, 0]), ("gradual", [0, 0, 1, 1, 2, 2]), ("two_stage", [0, 0, -1, -1, -1, -1])],
)
def test_curriculum_sampler_steps_follow_the_schedule(schedule, steps):
    sampler = Curriculum(curriculum_rows(), schedule=schedule, **PARAMS)
    assert sampler.steps() == steps
    assert sampler.record()["level"].to_pylist() == [lv for lv in steps for _ in range(5)]


def test_curriculum_sampler_gives_the_same_batches_whatever_order_the_view_rows_come_in():
    rows = curriculum_rows()
    shuffled = rows.take(pa.array([7, 3, 15, 0, 12, 1, 9, 14, 2, 8, 4, 13, 6, 10, 5, 11]))
    one, two = (Curriculum(r, schedule="cyclic", **PARAMS).record() for r in (rows, shuffled))
    assert one.equals(two) and one.num_rows == 30


def test_train_classifier_records_the_batches_the_curriculum_sampler_yields(tmp_path):
    """train_classifier trains with the sampler and saves every batch's rows: a sampler built again over the same
    rows (in another order) yields exactly those batches, and the losses' levels are its steps."""
    rows = curriculum_rows()
    trained = Curriculum(rows.take(pa.array(list(range(15, -1, -1)))), schedule="cyclic", **PARAMS)
    classifier_builder(trained, labels=["a", "b"], classifier={"kind": "builtin", "threads": 1})(tmp_path)
    recorded = pq.read_table(tmp_path / BATCHES)
    again = Curriculum(rows, schedule="cyclic", **PARAMS)
    assert recorded.equals(again.record())
    assert recorded.slice(5, 5)["uid"].to_pylist() == next(b for i, b in enumerate(again) if i == 1)["uid"].to_pylist()
    assert pq.read_table(tmp_path / LOSSES)["level"].to_pylist() == [0, 1, 2, 0, 1, 2]


def test_curriculum_sampler_names_the_missing_columns_and_a_wrong_source():
    with pytest.raises(
        InputError, match=r"^curriculum: the rows have columns \['uid', 'level'\]; missing \['parent_uid', 'rank', 'copy'\]"
    ):
        Curriculum(pa.table({"uid": ["a"], "level": [0]}), schedule="cyclic", **PARAMS)
    with pytest.raises(
        InputError, match=r"^curriculum: expected the rows as a pyarrow.Table or a view \(augdag.View\), found list"
    ):
        Curriculum([{"uid": "a"}], schedule="cyclic", **PARAMS)
    twice = pa.concat_tables([curriculum_rows(), curriculum_rows().slice(0, 1)])
    with pytest.raises(InputError, match=r"^curriculum: 17 rows but 16 distinct \(parent_uid, level, rank, copy\): rows of more"):
        Curriculum(twice, schedule="cyclic", **PARAMS)
    two = curriculum_rows().append_column("source", pa.array(["x"] * 8 + ["y"] * 8))
    with pytest.raises(InputError, match=r"^curriculum: the rows hold 2 datasets \['x', 'y'\]; one is sampled"):
        Curriculum(two, schedule="cyclic", **PARAMS)
    with pytest.raises(ConfError, match=r"^train_classifier.schedule: expected one of .*, found 'spiral'"):
        Curriculum(curriculum_rows(), schedule="spiral", **PARAMS)


def pairs(prefix: str, n: int) -> pa.Table:
    return pa.table({"src": [f"{prefix} s{i}" for i in range(n)], "tgt": [f"{prefix} t{i}" for i in range(n)]})


def test_mix_materialised_is_each_selection_its_copies_by_name_copy_uid_with_lines():
    mix = Mix({"b": pairs("b", 1), "a": pairs("a", 2)}, {"a": 2}, arm="x2", phase="continue")
    table = mix.table()
    got = [(r["source"], r["copy"], r["line"], r["arm"], r["phase"]) for r in table.to_pylist()]
    assert got == [("a", 0, 1, "x2", "continue"), ("a", 0, 2, "x2", "continue"), ("a", 1, 3, "x2", "continue")] + [
        ("a", 1, 4, "x2", "continue"),
        ("b", 0, 5, "x2", "continue"),
    ]
    a = table.filter(pa.compute.equal(table["source"], "a"))
    assert a["uid"].to_pylist()[:2] == a["uid"].to_pylist()[2:] == sorted(a["uid"].to_pylist()[:2])
    assert (mix.num_rows, mix.proportions()) == (5, {"a": 0.8, "b": 0.2})
    assert pa.Table.from_batches(list(mix.batches(batch_size=1))).equals(table)


def test_mix_interleaved_streams_every_row_once_in_the_arms_proportions():
    mix = Mix({"a": pairs("a", 3), "b": pairs("b", 3)}, {"a": 2}, arm="a2")
    # a holds 6 of 9 rows, b 3: the i-th row of a at (i + ½)/6, of b at (i + ½)/3
    stream = pa.Table.from_batches(list(mix.interleaved(batch_size=4)))
    assert "".join(stream["source"].to_pylist()) == "abaabaaba"
    assert stream["line"].to_pylist() == [1, 7, 2, 3, 8, 4, 5, 9, 6]
    assert stream.sort_by("line").equals(mix.table())
    seeded = pa.Table.from_batches(list(mix.interleaved(seed=3, batch_size=2)))
    assert "".join(seeded["source"].to_pylist()) == "abaabaaba"
    assert seeded.sort_by("line").equals(mix.table())
    assert seeded.equals(pa.Table.from_batches(list(mix.interleaved(seed=3, batch_size=5))))
    copies = seeded.filter(pa.compute.equal(seeded["source"], "a"))["copy"].to_pylist()
    assert copies == [0, 0, 0, 1, 1, 1]  # a copy's rows (permuted) before the next copy's


def test_mix_from_its_training_mix_rows_materialises_those_rows_again():
    mix = Mix({"b": pairs("b", 2), "a": pairs("a", 3), "none": pairs("n", 2)}, {"b": 3, "none": 0}, arm="b3")
    other = Mix({"a": pairs("a", 1)}, {}, arm="b3", phase="continue").table()
    rows = pa.concat_tables([mix.table(), other])
    again = Mix.from_training_mix(rows, arm="b3")
    assert again.table().equals(mix.table()) and again.entries() == [("a", 3, 1), ("b", 2, 3)]
    with pytest.raises(
        InputError,
        match=r"^training_mix: no rows of arm 'b4', phase 'train'; "
        r"the rows hold \(arm, phase\) \[\('b3', 'continue'\), \('b3', 'train'\)\]$",
    ):
        Mix.from_training_mix(rows, arm="b4")
    two_nights = pa.concat_tables([mix.table(), Mix({"a": pairs("c", 3)}, {}, arm="b3").table()])
    with pytest.raises(InputError, match=r"^training_mix: arm 'b3', phase 'train' has 12 rows but 9 lines: the rows of more"):
        Mix.from_training_mix(two_nights, arm="b3")


def test_mix_errors_name_the_arms_key():
    with pytest.raises(ConfError, match=r"^train_nmt.experiments.x.mix.a: the query returns \['src'\]; missing \['tgt'\]"):
        Mix({"a": pa.table({"src": ["s"]})}, {}, arm="x", key="train_nmt.experiments.x")
    with pytest.raises(ConfError, match=r"^train_nmt.copies.a: -1; expected a count >= 0$"):
        Mix({"a": pairs("a", 1)}, {"a": -1})


def test_selected_samples_yield_each_rounds_selection_by_original_then_uid():
    rows = pa.Table.from_pylist(
        [
            {"uid": "u3", "parent_uid": "p2", "round": 0, "selected": True},
            {"uid": "u1", "parent_uid": "p2", "round": 0, "selected": True},
            {"uid": "u2", "parent_uid": "p1", "round": 0, "selected": True},
            {"uid": "u4", "parent_uid": "p1", "round": 0, "selected": False},
            {"uid": "u5", "parent_uid": "p1", "round": 2, "selected": True},
            {"uid": "u6", "parent_uid": "p1", "round": 1, "selected": None},
        ]
    )
    samples = SelectedSamples(rows)
    assert samples.rounds() == [0, 2]
    assert [(r, t["uid"].to_pylist()) for r, t in samples] == [(0, ["u2", "u1", "u3"]), (2, ["u5"])]
    assert samples.round(1).num_rows == 0

"""EPiDA's pieces on constructed data: Eq. 14's batches, training that goes on from a saved classifier,
the classifier's feedback and SEAS selection through the stage function (REM and CEM against the
classifier's own probabilities), back-translation candidates, and the online round's reselection by a
changed classifier. The pipeline end to end is tests/pipelines/epida/test_flow_epida.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from conf.errors import InputError
from models.classifier import load_classifier
from storage.schemas import with_uid
from tasks.epida.feedback import AUGMENTED, back_translation_source, seas_score
from tasks.epida.seas import cem
from tasks.epida.train import eq14_batches, train_on

torch.set_num_threads(1)

LABELS = ["fruit", "music"]
CLF = {"kind": "builtin", "lr": 0.05, "device": "cpu", "threads": 1}


def labelled(rows: list[tuple[str, str]], source: str = "t") -> pa.Table:
    table = pa.table(
        {
            "text": [t for t, _ in rows],
            "label": [lb for _, lb in rows],
            "source": [source] * len(rows),
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
        }
    )
    return with_uid(table, "labeled")


def candidates(parent: pa.Table, texts: dict[int, list[str]], method: str = "eda_sr") -> pa.Table:
    """Candidates of the given texts for the parent rows (by row index), the parent's label kept."""
    out = []
    for i, cands in texts.items():
        row = parent.slice(i, 1).to_pylist()[0]
        out += [
            {
                "text": t,
                "label": row["label"],
                "source": row["source"],
                "line": row["line"],
                "parent_uid": row["uid"],
                "method": method,
                "candidate": j,
            }
            for j, t in enumerate(cands)
        ]
    table = with_uid(pa.Table.from_pylist(out).select(["text", "label", "source", "line"]), "labeled")
    for name in ("parent_uid", "method", "candidate"):
        table = table.append_column(name, pa.array([r[name] for r in out], pa.int32() if name == "candidate" else pa.string()))
    return table


def trained(tmp_path, rows: list[tuple[str, str]], name: str, epochs: int = 30) -> str:
    model, _ = train_on(labelled(rows), None, labels=LABELS, classifier=CLF, epochs=epochs, batch_size=4, seed=0)
    model.save(tmp_path / name)
    return str(tmp_path / name)


def test_eq14_batches_pair_every_original_once_per_epoch_with_as_many_augmented_rows():
    steps = list(eq14_batches(10, 7, epochs=2, batch_size=4, seed=3))
    assert [(e, len(o), len(a)) for e, o, a in steps] == [(0, 4, 4), (0, 4, 4), (0, 2, 2), (1, 4, 4), (1, 4, 4), (1, 2, 2)]
    for epoch in (0, 1):
        assert sorted(np.concatenate([o for e, o, _ in steps if e == epoch]).tolist()) == list(range(10))
    drawn = np.concatenate([a for _, _, a in steps]).tolist()  # 20 draws cycle through permutations of 7
    assert sorted(drawn[:7]) == sorted(drawn[7:14]) == list(range(7))
    assert drawn == np.concatenate([a for _, _, a in eq14_batches(10, 7, epochs=2, batch_size=4, seed=3)]).tolist()
    assert [len(a) for _, _, a in eq14_batches(5, 0, epochs=1, batch_size=2, seed=0)] == [0, 0, 0]  # Eq. 12


def test_training_goes_on_from_the_saved_classifier(tmp_path):
    rows = [("apple pear", "fruit"), ("violin drum", "music")] * 4
    path = trained(tmp_path, rows, "pt", epochs=2)
    assert load_classifier(tmp_path / "pt", device="cpu").steps == 4  # 8 rows / batch 4 × 2 epochs
    aug = labelled([("plum apple", "fruit"), ("flute violin", "music")])
    model, losses = train_on(
        labelled(rows), aug, labels=LABELS, classifier=CLF, epochs=3, batch_size=4, seed=0, init=path, round=1
    )
    assert model.steps == 4 + 6
    assert losses.column_names == ["round", "epoch", "step", "loss"]
    assert losses["round"].to_pylist() == [1] * 6 and losses["epoch"].to_pylist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(InputError, match="labels"):
        train_on(labelled(rows), None, labels=["a", "b"], classifier=CLF, epochs=1, batch_size=4, seed=0, init=path)


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """Two originals with six candidates each from two algorithms, and two classifiers that disagree: A knows
    fruit by 'apple', B by 'pear' (each saw only its word)."""
    tmp = tmp_path_factory.mktemp("seas")
    rows = labelled([("apple pear fruit", "fruit"), ("violin drum", "music")])
    cands = pa.concat_tables(
        [
            candidates(rows, {0: ["apple pear", "apple stone", "pear stone"], 1: ["violin", "drum song", "violin stone"]}),
            candidates(
                rows,
                {0: ["apple fruit pear", "pear fruit", "stone apple"], 1: ["drum violin", "drum", "song"]},
                method="back_translation",
            ),
        ]
    )
    music = [("violin drum", "music"), ("drum song", "music"), ("violin song", "music")]
    a = trained(tmp, [("apple", "fruit"), ("apple tree", "fruit"), *music], "a")
    b = trained(tmp, [("pear", "fruit"), ("pear tree", "fruit"), *music], "b")
    return rows, cands, a, b


def test_seas_scores_are_rem_and_cem_of_the_classifiers_probabilities(shard):
    rows, cands, a, _ = shard
    out = seas_score(
        rows, cands.slice(0, 6), cands.slice(6), m=2, round=3, classifier="fp-a", model_path=a, device="cpu", threads=1
    )
    assert out.schema == AUGMENTED and out.num_rows == 12
    model = load_classifier(a, device="cpu")
    p_t = model.predict_proba(cands["text"].to_pylist())
    parent = [0 if p == rows["uid"][0].as_py() else 1 for p in cands["parent_uid"].to_pylist()]
    p_x = model.predict_proba(rows["text"].to_pylist())[parent]
    y = [LABELS.index(x) for x in cands["label"].to_pylist()]
    # the stage's numbers vs the classifier's own distributions and the module's formulas: equal to float64 rounding
    np.testing.assert_allclose(out["p_label"].to_numpy(), p_t[range(12), y], rtol=1e-12)
    np.testing.assert_allclose(out["s_div"].to_numpy(), -np.log(p_t[range(12), y]), rtol=1e-12)
    np.testing.assert_allclose(out["s_qua"].to_numpy(), cem(p_t, p_x), rtol=1e-12)
    assert out["algorithm"].to_pylist() == ["eda"] * 6 + ["back_translation"] * 6
    assert set(out["round"].to_pylist()) == {3} and set(out["classifier"].to_pylist()) == {"fp-a"}
    for group in range(4):  # (row, algorithm): 3 candidates each, the 2 highest s_tot selected
        part = out.slice(group * 3, 3).to_pylist()
        best = sorted(part, key=lambda r: (-r["s_tot"], r["uid"]))[:2]
        assert {r["uid"] for r in part if r["selected"]} == {r["uid"] for r in best}


def test_the_online_round_reselects_with_the_changed_classifier(shard):
    rows, cands, a, b = shard
    picks = {}
    for name, path in (("a", a), ("b", b)):
        out = seas_score(rows, cands, m=1, mode="rem_only", classifier=name, model_path=path, device="cpu", threads=1)
        picks[name] = {
            t
            for t, s, p in zip(out["text"].to_pylist(), out["selected"].to_pylist(), out["parent_uid"].to_pylist())
            if s and p == rows["uid"][0].as_py()
        }
    # REM keeps the fruit candidate the classifier finds least fruit-like: without 'apple' for A, without 'pear' for B
    assert picks == {"a": {"pear stone", "pear fruit"}, "b": {"apple stone", "stone apple"}}


def test_a_candidate_of_an_unknown_parent_or_label_is_an_input_error(shard):
    rows, cands, a, _ = shard
    with pytest.raises(InputError, match="parent_uid is not among"):
        seas_score(rows.slice(0, 1), cands, model_path=a, device="cpu", threads=1)
    bad = cands.set_column(2, "label", pa.array(["vegetable"] * cands.num_rows))
    with pytest.raises(InputError, match="vegetable"):
        seas_score(rows, bad, model_path=a, device="cpu", threads=1)


def test_back_translation_keeps_the_first_n_draws_of_each_row():
    drawn = pa.table(
        {
            "uid": ["u3", "u1", "u2", "v1"],
            "parent_uid": ["p", "p", "p", "q"],
            "text": ["c", "a", "b", "x"],
            "label": ["l"] * 4,
            "source": ["s"] * 4,
            "line": pa.array([1, 1, 1, 2], pa.int64()),
            "sampler": ["top_k_top_p"] * 4,
            "sample": pa.array([5, 0, 2, 1], pa.int32()),
            "model": ["g"] * 4,
            "original": ["o"] * 4,
        }
    )
    out = back_translation_source(drawn, n_aug=2)
    assert out.to_pylist() == [
        {
            "uid": "u1",
            "text": "a",
            "label": "l",
            "source": "s",
            "line": 1,
            "parent_uid": "p",
            "method": "back_translation",
            "candidate": 0,
        },
        {
            "uid": "u2",
            "text": "b",
            "label": "l",
            "source": "s",
            "line": 1,
            "parent_uid": "p",
            "method": "back_translation",
            "candidate": 2,
        },
        {
            "uid": "v1",
            "text": "x",
            "label": "l",
            "source": "s",
            "line": 2,
            "parent_uid": "q",
            "method": "back_translation",
            "candidate": 1,
        },
    ]

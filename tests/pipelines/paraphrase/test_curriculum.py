"""tasks/paraphrase/curriculum.py, tasks/paraphrase/candidates.py and tasks/common/schedules.py: Eq. 3,
Eq. 4, the bag, the schedules."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from conf.errors import ConfError, InputError
from conf.offline import go_offline
from models.generation import BOTTOM_K, TOP_K_TOP_P
from tasks.common.schedules import MIXED, curriculum_batches, level_schedule
from tasks.paraphrase.candidates import SCORED, candidate_uids, sampling_plan, score_candidates
from tasks.paraphrase.curriculum import (
    CURRICULUM,
    build_curriculum,
    difficulty_levels,
    implication_filter,
    repeat_bag,
    select_bag,
)
from tests.models.test_nli import TABLE, tiny_nli_dir  # noqa: F401 — the session fixture

go_offline()


# ---- Eq. 4 ------------------------------------------------------------------------------------------


def test_twenty_candidates_get_levels_ceil_5_rank_over_20_four_per_level():
    sim = [0.91, 0.12, 0.55, 0.78, 0.33, 0.67, 0.05, 0.44, 0.89, 0.21, 0.60, 0.73, 0.38, 0.95, 0.15, 0.50, 0.82, 0.27, 0.64, 0.09]
    uids = [f"u{i:02d}" for i in range(20)]
    rank, level = difficulty_levels(sim, uids, levels=5)
    by_sim = sorted(range(20), key=lambda i: -sim[i])
    assert [int(rank[i]) for i in by_sim] == list(range(1, 21))
    assert [int(level[i]) for i in by_sim] == [math.ceil(5 * r / 20) for r in range(1, 21)]
    assert [int(level[i]) for i in by_sim] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4
    assert int(level[13]) == 1 and int(level[6]) == 5  # the most similar (0.95) is easiest, the least (0.05) hardest


def test_ties_in_g_rank_by_uid_then_copy_whatever_the_input_order():
    sim, uids = [0.5, 0.5, 0.9, 0.5], ["c", "a", "z", "b"]
    rank, _ = difficulty_levels(sim, uids, levels=2)
    assert rank.tolist() == [4, 2, 1, 3]
    perm = [3, 0, 2, 1]
    rank2, _ = difficulty_levels([sim[i] for i in perm], [uids[i] for i in perm], levels=2)
    assert {uids[i]: int(r) for i, r in zip(perm, rank2)} == {u: int(r) for u, r in zip(uids, rank)}
    rank3, _ = difficulty_levels([0.5, 0.5], ["a", "a"], [1, 0], levels=2)
    assert rank3.tolist() == [2, 1]


def test_uneven_bags_follow_the_formula():
    _, level = difficulty_levels([0.9, 0.8, 0.7], ["a", "b", "c"], levels=5)
    assert level.tolist() == [2, 4, 5]  # ceil(5/3), ceil(10/3), ceil(15/3)


# ---- Eq. 3 -------------------------------------------------------------------------------------------


def _scored(rows):
    n = len(rows)
    base = {
        "uid": [f"c{i}" for i in range(n)],
        "parent_uid": ["p"] * n,
        "text": [f"t{i}" for i in range(n)],
        "label": ["L"] * n,
        "source": ["s"] * n,
        "line": [1] * n,
        "sampler": [TOP_K_TOP_P] * n,
        "sample": list(range(n)),
        "model": ["g"] * n,
        "original": ["o"] * n,
        "mi": [r[0] for r in rows],
        "p_entail_fwd": [None] * n,
        "p_entail_bwd": [None] * n,
        "sim": [r[1] for r in rows],
    }
    return pa.table(base, schema=SCORED)


def test_eq_3_keeps_mi_whatever_g_and_non_mi_only_at_or_above_beta():
    scored = _scored([(True, 0.1), (False, 0.5), (False, 0.49), (None, 0.7), (None, 0.2), (True, 0.9)])
    kept, dropped = implication_filter(scored, beta=0.5)
    assert kept["uid"].to_pylist() == ["c0", "c1", "c3", "c5"]
    assert dropped["uid"].to_pylist() == ["c2", "c4"]
    assert set(dropped["reason"].to_pylist()) == {"not_mi_below_beta"}


def test_eq_3_with_a_tiny_nli_model_whose_outputs_the_test_controls(tiny_nli_dir):  # noqa: F811
    """The tiny model memorised TABLE: (x, x̄) mutual both ways, one way only, or neither. With G = chrF/100
    and β = 0.5, a mutual candidate is kept however dissimilar, a one-way one only when G ≥ β."""
    entail = {(p, h) for p, h, lab in TABLE if lab == "ENTAILMENT"}
    pairs = sorted({(p, h) for p, h, _ in TABLE})
    expected_mi = [(p, h) in entail and (h, p) in entail for p, h in pairs]
    assert any(expected_mi) and not all(expected_mi)
    n = len(pairs)
    cands = pa.table(
        {
            "uid": candidate_uids([p for p, _ in pairs], [h for _, h in pairs]),
            "parent_uid": [p for p, _ in pairs],
            "text": [h for _, h in pairs],
            "label": ["L"] * n,
            "source": ["s"] * n,
            "line": list(range(1, n + 1)),
            "sampler": [TOP_K_TOP_P] * n,
            "sample": list(range(n)),
            "model": ["g"] * n,
            "original": [p for p, _ in pairs],
        }
    )
    runtime = {"device": "cpu", "threads": 1, "max_tokens": 4096}
    scored = score_candidates(
        cands,
        nli={"entailment_label": None},
        similarity={"kind": "chrf"},
        nli_path=str(tiny_nli_dir),
        nli_runtime=runtime,
        similarity_runtime=runtime,
    )
    assert scored["mi"].to_pylist() == expected_mi
    import sacrebleu

    sims = [sacrebleu.sentence_chrf(h, [p]).score / 100 for p, h in pairs]
    assert scored["sim"].to_pylist() == pytest.approx(sims, abs=1e-12)
    kept, _ = implication_filter(scored, beta=0.5)
    assert kept["text"].to_pylist() == [h for (p, h), mi, s in zip(pairs, expected_mi, sims) if mi or s >= 0.5]


# ---- the bag ------------------------------------------------------------------------------------------


def _bag(spec):
    return [{"uid": f"{s[0]}{i}", "sampler": s, "sample": i, "sim": g} for s, i, g in spec]


def test_select_bag_takes_the_bottom_k_share_then_fills_with_top_k_top_p_in_draw_order():
    bag = _bag(
        [
            (BOTTOM_K, 3, 0.1),
            (BOTTOM_K, 0, 0.2),
            (BOTTOM_K, 1, 0.3),
            (TOP_K_TOP_P, 2, 0.9),
            (TOP_K_TOP_P, 0, 0.8),
            (TOP_K_TOP_P, 5, 0.7),
        ]
    )
    chosen = select_bag(bag, candidates=4, bottom_k_candidates=2)
    assert [(c["sampler"], c["sample"]) for c in chosen] == [(BOTTOM_K, 0), (BOTTOM_K, 1), (TOP_K_TOP_P, 0), (TOP_K_TOP_P, 2)]
    few_easy = select_bag(bag[:3] + bag[4:5], candidates=4, bottom_k_candidates=1)
    assert [(c["sampler"], c["sample"]) for c in few_easy] == [(BOTTOM_K, 0), (TOP_K_TOP_P, 0), (BOTTOM_K, 1), (BOTTOM_K, 3)]


def test_repeat_bag_cycles_most_similar_first_and_numbers_the_copies():
    bag = _bag([(TOP_K_TOP_P, 0, 0.2), (TOP_K_TOP_P, 1, 0.9), (TOP_K_TOP_P, 2, 0.5)])
    rep = repeat_bag(bag, 7)
    assert [(c["sim"], c["copy"]) for c in rep] == [(0.9, 0), (0.5, 0), (0.2, 0), (0.9, 1), (0.5, 1), (0.2, 1), (0.9, 2)]


def _rows(n):
    return pa.table(
        {
            "uid": [f"p{i}" for i in range(n)],
            "text": [f"sentence {i}" for i in range(n)],
            "label": ["a", "b"] * (n // 2),
            "source": ["d"] * n,
            "line": list(range(1, n + 1)),
        }
    )


def _candidates_for(parents, per_parent, *, sim=lambda i: 1 - i / 40, mi=False):
    rows = []
    for p, k in zip(parents, per_parent):
        for i in range(k):
            rows.append((p, f"{p} paraphrase {i}", BOTTOM_K if i % 5 == 4 else TOP_K_TOP_P, i, sim(i), mi))
    n = len(rows)
    return pa.table(
        {
            "uid": candidate_uids([r[0] for r in rows], [r[1] for r in rows]),
            "parent_uid": [r[0] for r in rows],
            "text": [r[1] for r in rows],
            "label": ["x"] * n,
            "source": ["d"] * n,
            "line": [1] * n,
            "sampler": [r[2] for r in rows],
            "sample": [r[3] for r in rows],
            "model": ["gen"] * n,
            "original": ["o"] * n,
            "mi": [r[5] for r in rows],
            "p_entail_fwd": [None] * n,
            "p_entail_bwd": [None] * n,
            "sim": [r[4] for r in rows],
        },
        schema=SCORED,
    )


def test_curriculum_has_originals_at_level_0_and_four_per_level_with_full_bags():
    rows = _rows(2)
    out = build_curriculum(
        rows,
        _candidates_for(["p0", "p1"], [30, 30]),
        beta=0.5,
        candidates=20,
        bottom_k_candidates=4,
        levels=5,
        shortfall="repeat",
        nli=None,
        similarity="chrf",
    )
    cur = out["part"]
    assert cur.schema == CURRICULUM
    for p, label in (("p0", "a"), ("p1", "b")):
        mine = [r for r in cur.to_pylist() if r["parent_uid"] == p]
        assert [r["level"] for r in mine if r["uid"] == p] == [0]
        assert sorted(r["level"] for r in mine if r["uid"] != p) == [lv for lv in range(1, 6) for _ in range(4)]
        assert {r["label"] for r in mine} == {label}  # paraphrases keep the original's label
        assert sum(r["sampler"] == BOTTOM_K for r in mine) == 4
    assert out["shortfall"].num_rows == 0
    # sim 1 - i/40 ≥ 0.5 for i ≤ 20: 21 survivors per sentence, 9 dropped
    assert out["dropped"].num_rows == 18


def test_too_few_survivors_are_listed_and_repeated_or_skipped():
    rows = _rows(4)
    cands = _candidates_for(["p0", "p1", "p2"], [30, 7, 1])  # p3 has no candidate at all
    rep = build_curriculum(
        rows, cands, beta=0.5, candidates=20, bottom_k_candidates=4, levels=5, shortfall="repeat", nli=None, similarity="chrf"
    )
    short = rep["shortfall"].to_pylist()
    assert [(r["parent_uid"], r["kept"], r["wanted"]) for r in short] == [("p1", 7, 20), ("p2", 1, 20), ("p3", 0, 20)]
    cur = rep["part"].to_pylist()
    for p in ("p1", "p2"):
        levels = sorted(r["level"] for r in cur if r["parent_uid"] == p and r["level"] > 0)
        assert levels == [lv for lv in range(1, 6) for _ in range(4)]
    assert [r["level"] for r in cur if r["parent_uid"] == "p3"] == [0]
    p1 = [r for r in cur if r["parent_uid"] == "p1" and r["level"] > 0]
    assert max(r["copy"] for r in p1) == 2 and len({r["uid"] for r in p1}) == 7
    skip = build_curriculum(
        rows, cands, beta=0.5, candidates=20, bottom_k_candidates=4, levels=5, shortfall="skip", nli=None, similarity="chrf"
    )["part"].to_pylist()
    assert sorted(r["level"] for r in skip if r["parent_uid"] == "p1" and r["level"] > 0) == [1, 2, 3, 3, 4, 5, 5]
    assert [r["level"] for r in skip if r["parent_uid"] == "p2"] == [0, 5]


# ---- sampling plan -------------------------------------------------------------------------------------


def test_sampling_plan_draws_the_appendix_a_shares_oversampled():
    plan = sampling_plan(
        candidates=20,
        bottom_k_candidates=4,
        oversample=2.0,
        top_k=120,
        top_p=0.95,
        bottom_k=2,
        bottom_k_steps=1,
        temperature=1.0,
        seed=0,
    )
    assert [(s.name, n, s.bottom_k, s.bottom_k_steps, s.top_k, s.top_p) for s, n in plan] == [
        (TOP_K_TOP_P, 32, 0, 0, 120, 0.95),
        (BOTTOM_K, 8, 2, 1, 120, 0.95),
    ]


# ---- schedules (Alg. 1) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, expected",
    [
        ("original", [0] * 12),
        ("none", [MIXED] * 12),
        ("two_stage", [0, 0, 0, 0] + [MIXED] * 8),
        ("gradual", [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]),
        ("cyclic", [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]),
        ("inverse_cyclic", [0, 0, 1, 1, 2, 2, 2, 2, 1, 1, 0, 0]),
    ],
)
def test_level_order_over_steps_matches_each_schedule(schedule, expected):
    assert level_schedule(schedule, levels=2, cycles=2, steps_per_level=2) == expected


def test_cyclic_with_five_levels_and_three_cycles():
    steps = level_schedule("cyclic", levels=5, cycles=3, steps_per_level=1)
    assert steps == [0, 1, 2, 3, 4, 5] * 3
    assert level_schedule("inverse_cyclic", levels=5, cycles=3, steps_per_level=1) == [
        0,
        1,
        2,
        3,
        4,
        5,
        5,
        4,
        3,
        2,
        1,
        0,
        0,
        1,
        2,
        3,
        4,
        5,
    ]
    with pytest.raises(
        ConfError,
        match=r"^train_classifier.schedule: expected one of original, none, two_stage, "
        r"gradual, cyclic, inverse_cyclic, found 'spiral'$",
    ):
        level_schedule("spiral", levels=5, cycles=1, steps_per_level=1)


def test_batches_refuse_a_curriculum_without_original_rows():
    parents, levels, uids = ["p0", "p0", "p1"], [1, 2, 0], ["p0-1", "p0-2", "p1-x"]  # p1-x: level 0, not its parent
    with pytest.raises(
        InputError,
        match=r"^curriculum \(columns level, uid, parent_uid\): expected at least one "
        r"original row \(level 0, uid = parent_uid\), found none in 3 rows, "
        r"levels \[0, 1, 2\]\. Hint: ",
    ):
        next(curriculum_batches(parents, levels, uids, [0], batch_size=2, original_share=0.5, seed=0))


def test_batches_mix_the_original_share_with_paraphrases_of_the_step_level():
    parents, levels, uids = [], [], []
    for p in range(10):
        parents.append(f"p{p}"), levels.append(0), uids.append(f"p{p}")
        for lv in (1, 2):
            for k in range(2):
                parents.append(f"p{p}"), levels.append(lv), uids.append(f"p{p}-{lv}-{k}")
    steps = [0, 1, 2, MIXED, 2]
    batches = list(curriculum_batches(parents, levels, uids, steps, batch_size=5, original_share=0.2, seed=3))
    assert [len(b) for b in batches] == [5] * 5
    lv = [[levels[i] for i in b] for b in batches]
    assert lv[0] == [0] * 5
    assert lv[1] == [0, 1, 1, 1, 1] and lv[2] == [0, 2, 2, 2, 2] and lv[4] == [0, 2, 2, 2, 2]
    assert lv[3][0] == 0 and set(lv[3][1:]) <= {1, 2}
    # the first 10 drawn sentences are a permutation of all 10: uniform sampling without repeats per epoch
    assert sorted(parents[i] for b in batches[:2] for i in b) == sorted(f"p{p}" for p in range(10))
    again = list(curriculum_batches(parents, levels, uids, steps, batch_size=5, original_share=0.2, seed=3))
    assert all((a == b).all() for a, b in zip(batches, again))


def test_a_curriculum_without_paraphrases_is_refused_unless_the_schedule_is_original(caplog):
    from conf.errors import ConfError
    from flows.pipelines.train_classifier import check_levels

    only_originals = pa.table({"level": [0, 0, 0]})
    check_levels(only_originals, "original", 5, "d")
    with pytest.raises(ConfError, match="lower paraphrase.beta"):
        check_levels(only_originals, "cyclic", 5, "d")
    with caplog.at_level("WARNING", logger="augdag.run"):  # the run's logger (a flow run's, Prefect's), never stdout
        check_levels(pa.table({"level": [0, 1, 2, 5]}), "cyclic", 5, "d")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "the curriculum of 'd' has no paraphrases at level(s) [3, 4]; those steps use originals")
    ]

"""train_nmt's experiment arms (issue 17, part 2): mixes with copies, sacrebleu's paired tests against the baseline,
the profile's checks. The pipeline per arm × seed × test set, with continued training from an arm's checkpoint, runs
in `make test-e2e`: tests/e2e/test_train_nmt_pipeline.py."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ConfError
from conf.sections.experiments import TrainNMTConf
from storage.parts import Parts
from tasks.train_nmt.experiments import arm_mix
from tasks.train_nmt.significance import arm_translations, paired_significance, paired_tests


def _pairs(prefix: str, n: int) -> pa.Table:
    return pa.table({"src": [f"{prefix} source {i}" for i in range(n)], "tgt": [f"{prefix} target {i}" for i in range(n)]})


def test_arm_mix_copies_give_exact_row_counts_10_to_1():
    mix = arm_mix(
        {"bitext": _pairs("b", 7), "paraphrased": _pairs("p", 3)},
        {"bitext": 10, "paraphrased": 1},
        arm="para_10_1",
        phase="train",
    )
    assert mix.num_rows == 10 * 7 + 3
    counts = {
        (r["source"], r["copy"]): r["n"]
        for r in pa.TableGroupBy(mix, ["source", "copy"])
        .aggregate([([], "count_all")])
        .rename_columns(["source", "copy", "n"])
        .to_pylist()
    }
    assert counts == {**{("bitext", c): 7 for c in range(10)}, ("paraphrased", 0): 3}
    assert set(mix["arm"].to_pylist()) == {"para_10_1"} and set(mix["phase"].to_pylist()) == {"train"}
    assert mix["line"].to_pylist() == list(range(1, 74))
    # every copy holds the same pairs: 7 distinct uids repeated 10 times
    bitext = mix.filter(pa.compute.equal(mix["source"], "bitext"))
    assert len(set(bitext["uid"].to_pylist())) == 7


def test_arm_mix_without_a_copy_count_takes_each_row_once_and_zero_copies_drop_it():
    mix = arm_mix({"a": _pairs("a", 4), "b": _pairs("b", 2)}, {"b": 0}, arm="x", phase="continue")
    assert (mix.num_rows, set(mix["source"].to_pylist()), set(mix["phase"].to_pylist())) == (4, {"a"}, {"continue"})


def test_conf_test_is_a_one_element_tests_and_mix_is_the_one_arm():
    tn = TrainNMTConf.model_validate({"test": "t", "mix": {"orig": "SELECT src, tgt FROM bitext"}, "copies": {"orig": 2}})
    assert (tn.arm_names(), tn.baseline_arm(), tn.arm_seeds("mix")) == (["mix"], "mix", [1])
    arm = tn.arms({"bitext": "unused"})["mix"]
    assert (arm.mix, arm.copies, arm.continue_on) == ({"orig": "SELECT src, tgt FROM bitext"}, {"orig": 2}, None)
    assert TrainNMTConf().arms({"bitext": "SELECT 1"})["mix"].mix == {"bitext": "SELECT 1"}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"experiments": {"a": {"mix": {"x": "S"}, "copies": {"y": 2}}}}, "copies names ['y'], not entries of the mix (x)"),
        ({"experiments": {"a": {"mix": {"x": "S"}}}, "baseline": "b"}, "baseline: 'b' is not an arm (a)"),
        ({"experiments": {"a": {"mix": {"x": "S"}}}, "mix": {"x": "S"}}, "`mix`/`copies` are the one arm"),
        (
            {"experiments": {"a": {"mix": {"x": "S"}, "seeds": [1, 2]}, "b": {"mix": {"x": "S"}}}},
            "every arm needs as many seeds as the baseline 'a' (2)",
        ),
        ({"test": "t", "tests": ["t"]}, "set `tests` (a list) or `test` (one), not both"),
        (
            {"experiments": {"a": {"mix": {"x": "S"}, "continue_on": {"mix": {"x": "S"}, "copies": {"z": 1}}}}},
            "copies names ['z']",
        ),
    ],
)
def test_conf_refuses_arms_that_cannot_be_compared(doc, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        TrainNMTConf.model_validate(doc)


# -- paired significance on constructed hypotheses -------------------------------------------------------------

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "under",
    "mat",
    "rug",
    "near",
    "far",
    "home",
    "town",
    "river",
    "sea",
    "black",
    "white",
    "small",
    "big",
]
_R = random.Random(5)
REFS = [" ".join(_R.choice(WORDS) for _ in range(_R.randint(5, 12))) for _ in range(60)]


def _noisy(refs: list[str], share: float, seed: int) -> list[str]:
    """Each word replaced by a random one with probability ``share`` (seeded)."""
    r = random.Random(seed)
    return [" ".join(r.choice(WORDS) if r.random() < share else w for w in ref.split()) for ref in refs]


WORSE, BETTER = _noisy(REFS, 0.5, 1), _noisy(REFS, 0.15, 2)  # the baseline, and a system with a third of its errors


def test_paired_bootstrap_identical_system_has_p_1_and_a_better_one_p_below_005_seeded():
    rows = paired_tests(
        {"base": WORSE, "same": list(WORSE), "better": BETTER}, REFS, baseline="base", resamples=200, ar_trials=200, seed=7
    )
    by = {(r["arm"], r["metric"]): r for r in rows}
    assert [(r["arm"], r["metric"]) for r in rows] == [(a, m) for m in ("BLEU", "chrF") for a in ("base", "same", "better")]
    for metric in ("BLEU", "chrF"):
        assert (by[("base", metric)]["p_value"], by[("base", metric)]["p_ar"]) == (None, None)
        assert (by[("same", metric)]["p_value"], by[("same", metric)]["p_ar"]) == (1.0, 1.0)  # nothing to test
        better = by[("better", metric)]
        assert better["p_value"] == pytest.approx(1 / 201) and better["p_ar"] == pytest.approx(1 / 201)  # 1/(R+1)
        assert better["score"] > by[("base", metric)]["score"]
        for arm in ("base", "same", "better"):  # each CI holds the system's own corpus score
            r = by[(arm, metric)]
            assert r["ci_low"] < r["score"] < r["ci_high"] and r["sentences"] == len(REFS)
        assert by[("same", metric)]["ci_low"] == by[("base", metric)]["ci_low"]  # the same resamples
    assert by[("base", "BLEU")]["signature"].startswith("nrefs:1|bs:200|seed:7|case:mixed|eff:no|tok:13a")
    again = paired_tests(
        {"base": WORSE, "same": list(WORSE), "better": BETTER}, REFS, baseline="base", resamples=200, ar_trials=200, seed=7
    )
    assert again == rows  # seeded: the same resamples, the same numbers


def test_paired_bootstrap_sees_a_small_difference_as_chance():
    one_off = list(WORSE)
    one_off[0] = REFS[0]  # one sentence of 60 corrected
    r = {
        x["metric"]: x
        for x in paired_tests({"base": WORSE, "one_off": one_off}, REFS, baseline="base", resamples=1000, ar_trials=0, seed=7)
        if x["arm"] == "one_off"
    }
    assert r["BLEU"]["p_value"] > 0.05 and r["BLEU"]["p_ar"] is None


def _parts(tmp_path, name: str, table: pa.Table) -> Parts:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(table, path)
    return Parts((path,))


def _translations(hyps: list[str]) -> pa.Table:
    return pa.table({"uid": [f"u{i}" for i in range(len(hyps))], "src": ["s"] * len(hyps), "ref": REFS[: len(hyps)], "hyp": hyps})


def test_seeds_are_concatenated_in_order_and_paired_with_the_baselines(tmp_path):
    n = 30
    outputs = {("base", 1): WORSE[:n], ("base", 2): REFS[:n], ("arm", 1): BETTER[:n], ("arm", 2): WORSE[:n]}
    systems = [{"arm": a, "seed": s, "model": f"m-{a}-{s}"} for a, s in outputs]
    gathered = arm_translations(
        *(_parts(tmp_path, f"{a}{s}", _translations(h)) for (a, s), h in outputs.items()), systems=systems, testset="t"
    )
    assert gathered.num_rows == 4 * n and gathered["seed"].to_pylist()[n - 1 : n + 1] == [1, 2]
    table = paired_significance(
        _parts(tmp_path, "gathered", gathered), baseline="base", arms=["base", "arm"], resamples=200, ar_trials=0, seed=3
    )
    expected = paired_tests(
        {"base": WORSE[:n] + REFS[:n], "arm": BETTER[:n] + WORSE[:n]},
        REFS[:n] * 2,
        baseline="base",
        resamples=200,
        ar_trials=0,
        seed=3,
    )
    assert table.to_pylist() == [{**e, "seeds": 2} for e in expected]


def test_translations_of_other_test_rows_are_refused(tmp_path):
    a, b = _translations(WORSE[:5]), _translations(WORSE[:5]).set_column(0, "uid", pa.array(list("vwxyz")))
    with pytest.raises(Exception, match="translated other test rows"):
        arm_translations(
            _parts(tmp_path, "a", a),
            _parts(tmp_path, "b", b),
            testset="t",
            systems=[{"arm": "x", "seed": 1, "model": "m"}, {"arm": "y", "seed": 1, "model": "n"}],
        )


def test_summary_lines_give_the_baseline_and_each_arms_delta_and_p():
    from flows.reports.train_nmt_report import arm_summary
    from flows.reports.train_nmt_report import summary_lines as train_nmt_lines

    evaluation = [
        {"testset": "t", "arm": a, "seed": s, "metric": m, "score": v, "signature": f"sig-{m}"}
        for a, s, m, v in [
            ("bitext", 1, "BLEU", 30.0),
            ("bitext", 2, "BLEU", 32.0),
            ("bitext", 1, "chrF", 50.0),
            ("bitext", 2, "chrF", 52.0),
            ("para", 1, "BLEU", 31.0),
            ("para", 2, "BLEU", 32.2),
            ("para", 1, "chrF", 51.0),
            ("para", 2, "chrF", 51.0),
        ]
    ]
    significance = [
        {"testset": "t", "arm": a, "metric": m, "p_value": p, "p_ar": p, "ci_low": 1.0, "ci_high": 2.0}
        for a, m, p in [("bitext", "BLEU", None), ("bitext", "chrF", None), ("para", "BLEU", 0.03), ("para", "chrF", 0.5)]
    ]
    arms = {"bitext": {"label": "bitext", "seeds": [1, 2]}, "para": {"label": "paraphrase 10:1 + CT", "seeds": [1, 2]}}
    summary = arm_summary(evaluation, significance, "bitext", arms)
    para = next(r for r in summary if r["arm"] == "para" and r["metric"] == "BLEU")
    assert (para["mean"], para["delta"], para["sd"]) == pytest.approx((31.6, 0.6, 0.8485281374))
    lines = train_nmt_lines(
        {"train_nmt": {"tests": ["t"], "baseline": "bitext", "arms": arms, "summary": summary, "evaluation": evaluation}}
    )
    assert lines == [
        "bitext (baseline): BLEU = 31.00 ± 1.41, chrF = 51.00 ± 1.41 on t (mean ± sd over 2 seeds)  sig-BLEU",
        "paraphrase 10:1 + CT: +0.6 BLEU (p = 0.03), +0.0 chrF (p = 0.5); BLEU = 31.60 ± 0.85, "
        "chrF = 51.00 ± 0.00 on t (mean ± sd over 2 seeds); p resamples test sentences; training variance not "
        "measured: use ≥ 3 seeds",
    ]


def test_a_mix_over_a_view_that_does_not_exist_names_the_key_and_the_pipeline_that_makes_it(tmp_path):
    import types

    from flows.engine import registry
    from flows.pipelines.train_nmt import select_mix
    from storage.catalog import Catalog

    registry.load()
    run = types.SimpleNamespace(catalog=Catalog(tmp_path))
    with pytest.raises(ConfError) as e:
        select_mix(run, {"rej": "SELECT src, tgt FROM rejuvenated"}, "train_nmt.experiments.r.mix")
    assert str(e.value).startswith("train_nmt.experiments.r.mix.rej: ")
    assert "the view `rejuvenated` exists once the rejuvenation pipeline has run" in str(e.value)
    with pytest.raises(ConfError, match="no pipeline makes a view `no_such_view`"):
        select_mix(run, {"x": "SELECT src, tgt FROM no_such_view"}, "train_nmt.mix")

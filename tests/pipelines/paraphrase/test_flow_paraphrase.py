"""The paraphrase curriculum and its classifier end to end on the demo corpus, under Prefect: round-trip
paraphrases with tiny fairseq models trained on the demo bitext, the tiny NLI model of tests/models/test_nli.py."""

from __future__ import annotations

import math

import pytest

from conf.loader import load_profile
from demo import write_demo
from tests.conftest import REPO, catalog_rows
from tests.models.test_nli import tiny_nli_dir  # noqa: F401 — the session fixture

pytestmark = pytest.mark.slow

CANDIDATES, BOTTOM = 10, 2
# 60-update models paraphrase poorly (G ≈ 0.1): a low β keeps enough. One draw per kept candidate (oversample 1,
# half the sampling) at temperature 1: a few draws fail Eq. 3 (~10 of 600: short ones, neither entailed nor close),
# so that some sentences fall short of CANDIDATES (~9 of 60) and most do not.
TINY = [
    "paraphrase.generator.forward.train.max_update=60",
    "paraphrase.generator.backward.train.max_update=60",
    f"paraphrase.candidates={CANDIDATES}",
    f"paraphrase.bottom_k_candidates={BOTTOM}",
    "paraphrase.oversample=1",
    "paraphrase.temperature=1.0",
    "train_classifier.steps_per_level=4",
    "train_classifier.batch_size=8",
    "paraphrase.beta=0.12",
]


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("pcc-demo-data")
    # 300 pairs train the two tiny models as well as 1,200 (an update is 1,024 tokens however many pairs); 60
    # labelled rows are two shards of 50
    write_demo(root, seed=11, bitext_rows=300, mono_rows=100, labeled_rows=60, slots_rows=100, test_rows=60)
    return root


def _conf(cache, data, *sets):
    return load_profile(
        REPO / "conf" / "demo.yaml",
        ["shard_size=50", "pipelines=[paraphrase, train_classifier]", *TINY, *sets],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )


@pytest.fixture(scope="module")
def runs(prefect_harness, demo_root, tmp_path_factory, tiny_nli_dir):  # noqa: F811
    from flows.pipelines.paraphrase import paraphrase_flow
    from flows.pipelines.train_classifier import train_classifier_flow

    cache = tmp_path_factory.mktemp("pcc-cache")
    conf = _conf(cache, demo_root, f"paraphrase.nli.model={tiny_nli_dir}", "paraphrase.nli.threads=1")
    return cache, conf, paraphrase_flow(conf, profile="test"), train_classifier_flow(conf, profile="test")


def test_every_curriculum_row_traces_back_to_an_original_row(runs):
    cache, _, summary, _ = runs
    originals = catalog_rows(cache, "SELECT count(*) AS n FROM labeled WHERE source = 'demo_labeled'")[0]["n"]
    assert catalog_rows(cache, "SELECT count(*) AS n FROM curriculum WHERE level = 0")[0]["n"] == originals
    orphans = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM curriculum c ANTI JOIN labeled l ON l.uid = c.parent_uid "
        "AND l.label = c.label AND l.source = c.source AND l.line = c.line",
    )[0]["n"]
    assert orphans == 0
    assert catalog_rows(cache, "SELECT count(*) AS n FROM curriculum WHERE level = 0 AND uid <> parent_uid")[0]["n"] == 0
    # every paraphrase is one of its original's scored candidates, with the same G and MI
    mismatched = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM curriculum c ANTI JOIN paraphrase_candidates p "
        "ON p.uid = c.uid AND p.parent_uid = c.parent_uid AND p.sim = c.sim AND p.mi = c.mi "
        "WHERE c.level > 0",
    )[0]["n"]
    assert mismatched == 0
    pp = summary["paraphrase"]
    assert pp["curriculum"] == catalog_rows(cache, "SELECT count(*) AS n FROM curriculum")[0]["n"]
    assert pp["ran"]["generator"].startswith("round trip: ctranslate2") and "fairseq" in pp["ran"]["generator"]
    assert pp["ran"]["similarity"] == "chrf" and pp["ran"]["nli"].endswith("model")


def test_eq_3_and_eq_4_hold_on_the_flow_output(runs):
    cache, conf, summary, _ = runs
    beta = conf.paraphrase.beta
    # the filter: a scored candidate is in the curriculum (or was not needed) only if MI or G ≥ β
    bad = catalog_rows(cache, f"SELECT count(*) AS n FROM curriculum WHERE level > 0 AND NOT (mi OR sim >= {beta})")[0]["n"]
    assert bad == 0
    assert catalog_rows(cache, "SELECT count(*) AS n FROM paraphrase_candidates WHERE mi IS NULL")[0]["n"] == 0
    # every sentence with a survivor has CANDIDATES/5 rows per level (shortfall: repeat)
    per_level = catalog_rows(cache, "SELECT parent_uid, level, count(*) AS n FROM curriculum WHERE level > 0 GROUP BY ALL")
    assert {r["n"] for r in per_level} == {CANDIDATES // 5}
    # G never increases with the level within a sentence
    inverted = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM curriculum a JOIN curriculum b USING (parent_uid) "
        "WHERE a.level > 0 AND b.level > a.level AND b.sim > a.sim",
    )[0]["n"]
    assert inverted == 0
    # the shortfall is exactly the sentences with fewer than CANDIDATES Eq. 3 survivors (none counts too)
    survivors = {
        r["parent_uid"]: r["n"]
        for r in catalog_rows(
            cache, f"SELECT parent_uid, count(*) AS n FROM paraphrase_candidates WHERE mi OR sim >= {beta} GROUP BY ALL"
        )
    }
    originals = [r["uid"] for r in catalog_rows(cache, "SELECT uid FROM curriculum WHERE level = 0")]
    assert summary["paraphrase"]["shortfall"]["count"] == sum(survivors.get(u, 0) < CANDIDATES for u in originals) > 0
    repeated = catalog_rows(cache, "SELECT count(DISTINCT parent_uid) AS n FROM curriculum WHERE copy > 0")[0]["n"]
    assert repeated == sum(0 < survivors.get(u, 0) < CANDIDATES for u in originals)
    levels = catalog_rows(cache, "SELECT level, rows FROM curriculum_levels ORDER BY level")
    assert [r["level"] for r in levels] == list(range(6))


def test_diversity_per_sampler_and_bottom_k_first_tokens(runs):
    cache, *_ = runs
    rows = {r["sampler"]: r for r in catalog_rows(cache, "SELECT * FROM paraphrase_diversity")}
    assert set(rows) == {"top_k_top_p", "bottom_k"}
    counts = {
        r["sampler"]: r["n"]
        for r in catalog_rows(cache, "SELECT sampler, count(*) AS n FROM paraphrase_candidates GROUP BY sampler")
    }
    assert {s: rows[s]["candidates"] for s in rows} == counts
    for r in rows.values():
        assert 0 < r["distinct_1"] <= 1 and all(0 <= r[f"distinct_{n}"] <= 1 for n in range(1, 7))
    # bottom-k removes the dominant first tokens: it copies the input's first word less than top-k/top-p does
    assert rows["bottom_k"]["copies_first_token"] < rows["top_k_top_p"]["copies_first_token"]


def test_classifier_is_scored_into_evaluations_with_the_cyclic_loss_curve(runs):
    cache, _, _, summary = runs
    tc = summary["train_classifier"]
    evals = {r["metric"]: r for r in catalog_rows(cache, "SELECT * FROM evaluations WHERE model_name = 'classifier'")}
    assert set(evals) == {"accuracy", "macro_f1"}
    preds = catalog_rows(cache, "SELECT label, predicted FROM test_predictions")
    assert len(preds) == 60 == evals["accuracy"]["sentences"]
    # the stage's sklearn scores on label indices vs these on the stored rows: equal up to the last bits
    assert evals["accuracy"]["score"] == pytest.approx(sum(p["label"] == p["predicted"] for p in preds) / 60, rel=1e-12)
    from sklearn.metrics import f1_score

    labels = tc["labels"]
    assert evals["macro_f1"]["score"] == pytest.approx(
        f1_score([p["label"] for p in preds], [p["predicted"] for p in preds], labels=labels, average="macro", zero_division=0),
        rel=1e-12,
    )
    assert [(s["level"], s["steps"]) for s in tc["loss_per_level"]] == [(lv, 4) for _ in range(2) for lv in range(6)]
    assert all(math.isfinite(s["mean_loss"]) for s in tc["loss_per_level"])
    assert tc["loss_per_level"][-1]["mean_loss"] < tc["loss_per_level"][0]["mean_loss"]

"""The epida pipeline and the classifier arms end to end on the demo corpus, under Prefect: EDA with
WordNet synonyms, the builtin classifier's feedback, two online rounds; then train_classifier's none, eda
and epida arms over two seeds."""

from __future__ import annotations

import statistics

import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.catalog import Catalog
from tests.conftest import REPO, catalog_rows
from tests.pipelines.epida.test_cwe import mlm_dir  # noqa: F401 — the module fixture

pytestmark = pytest.mark.slow

K, M = 3, 2
# two rounds (epochs / every_epochs); one epoch is enough for every classifier, none is judged by its accuracy
SETS = [
    "shard_size=40",
    "pipelines=[epida, train_classifier]",
    f"epida.amplification={K}",
    f"epida.m={M}",
    "epida.online=true",
    "epida.pretrain_epochs=1",
    "epida.epochs=2",
    "epida.every_epochs=1",
    "train_classifier.augmentation=[none, eda, epida]",
    "train_classifier.seeds=[0, 1]",
    "train_classifier.epochs=1",
]


@pytest.fixture(scope="module")
def runs(prefect_harness, tmp_path_factory):
    pytest.importorskip("nltk")
    from models.wordnet import wordnet_root

    try:
        wordnet_root()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no WordNet database here: {e}")
    from flows.pipelines.epida import epida_flow
    from flows.pipelines.train_classifier import train_classifier_flow

    data, cache = tmp_path_factory.mktemp("epida-data"), tmp_path_factory.mktemp("epida-cache")
    # 80 labelled rows: two shards of 40
    write_demo(data, seed=5, bitext_rows=10, mono_rows=10, labeled_rows=80, slots_rows=10, test_rows=30)
    conf = load_profile(REPO / "conf" / "demo.yaml", SETS, cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})
    return cache, conf, epida_flow(conf, profile="test"), train_classifier_flow(conf, profile="test")


def test_k_m_candidates_scored_and_m_selected_per_row_and_round(runs):
    cache, _, summary, _ = runs
    originals = catalog_rows(cache, "SELECT count(*) AS n FROM labeled WHERE source = 'demo_labeled'")[0]["n"]
    per_row = catalog_rows(
        cache,
        "SELECT round, parent_uid, count(*) AS scored, count(*) FILTER (WHERE selected) AS kept FROM augmented GROUP BY ALL",
    )
    assert len(per_row) == 2 * originals  # every original, in rounds 0 and 1
    assert {(r["scored"], r["kept"]) for r in per_row} == {(K * M, M)}
    assert sorted({r["round"] for r in per_row}) == [0, 1]
    counts = summary["epida"]["counts"]
    assert sum(c["candidates"] for c in counts) == 2 * K * M * originals
    assert sum(c["selected"] for c in counts) == 2 * M * originals
    assert {c["method"] for c in counts} == {"eda_sr", "eda_ri", "eda_rs", "eda_rd"}


def test_every_augmented_row_traces_back_to_its_original(runs):
    cache, _, _, _ = runs
    orphans = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM augmented a ANTI JOIN labeled l ON l.uid = a.parent_uid AND "
        "l.label = a.label AND l.source = a.source AND l.line = a.line",
    )[0]["n"]
    assert orphans == 0
    # the view's artifact descends (lineage) from the rounds' seas artifacts, which descend from the cleaned rows
    chain = catalog_rows(
        cache,
        """
        WITH RECURSIVE up(fp) AS (SELECT fingerprint FROM artifacts WHERE view = 'augmented'
                                  UNION SELECT l.parent FROM lineage l JOIN up ON l.child = up.fp)
        SELECT DISTINCT a.stage FROM up JOIN artifacts a ON a.fingerprint = up.fp ORDER BY a.stage""",
    )
    assert {"augmented", "seas", "eda", "clean", "read"} <= {r["stage"] for r in chain}


def test_the_online_round_is_scored_by_the_classifier_trained_on_round_0(runs):
    cache, _, summary, _ = runs
    by_round = {r["round"]: r["classifier"] for r in catalog_rows(cache, "SELECT DISTINCT round, classifier FROM augmented")}
    models = {
        r["name"]: r["fingerprint"] for r in catalog_rows(cache, "SELECT name, fingerprint FROM models WHERE name LIKE 'epida_%'")
    }
    assert by_round == {0: models["epida_pretrain"], 1: models["epida_round_0"]}
    assert summary["epida"]["classifier"] == models["epida_round_1"]
    seas = [s["fingerprint"] for s in summary["stages"] if s["stage"] == "seas"]
    trained_on = {
        r["parent"] for r in catalog_rows(cache, f"SELECT parent FROM lineage WHERE child = '{models['epida_round_1']}'")
    }
    assert seas[1] in trained_on  # round 1's model descends from the candidates it was trained on
    # round 1 draws new candidates: not the texts of round 0
    shared = catalog_rows(
        cache, "SELECT count(*) AS n FROM augmented a JOIN augmented b ON a.uid = b.uid AND a.round = 0 AND b.round = 1"
    )[0]["n"]
    total = catalog_rows(cache, "SELECT count(*) AS n FROM augmented WHERE round = 0")[0]["n"]
    assert shared < total / 2


def test_arms_are_evaluated_per_seed_with_mean_and_sd(runs):
    cache, _, _, trained = runs
    rows = catalog_rows(cache, "SELECT arm, seed, metric, score FROM evaluations WHERE model_name = 'classifier'")
    assert sorted({(r["arm"], r["seed"]) for r in rows}) == [(a, s) for a in ("eda", "epida", "none") for s in (0, 1)]
    summary = {
        (r["arm"], r["metric"]): r
        for r in catalog_rows(cache, "SELECT * FROM evaluation_summary WHERE model_name = 'classifier'")
    }
    for (arm, metric), s in summary.items():
        scores = [r["score"] for r in rows if (r["arm"], r["metric"]) == (arm, metric)]
        assert s["seeds"] == 2
        assert s["mean"] == pytest.approx(statistics.fmean(scores), rel=1e-12)
        assert s["sd"] == pytest.approx(statistics.stdev(scores), rel=1e-9, abs=1e-15)
    flow_summary = {(s["augmentation"], s["metric"]): s for s in trained["train_classifier"]["summary"]}
    assert set(flow_summary) == set(summary)
    feedback = catalog_rows(cache, "SELECT arm FROM evaluations WHERE model_name = 'feedback_classifier'")
    assert {r["arm"] for r in feedback} == {"epida_both_online"}


def test_the_eda_arm_adds_m_random_candidates_per_row_and_the_epida_arm_the_selection(runs):
    from flows.pipelines.train_classifier import augmented_rows

    cache, _, _, _ = runs
    originals = catalog_rows(cache, "SELECT count(*) AS n FROM labeled WHERE source = 'demo_labeled'")[0]["n"]
    eda = [augmented_rows(Catalog(cache), "eda", "demo_labeled", m=M, seed=s) for s in (0, 1)]
    epida = augmented_rows(Catalog(cache), "epida", "demo_labeled", m=M, seed=0)
    assert eda[0].num_rows == eda[1].num_rows == M * originals == epida.num_rows
    assert eda[0]["uid"].to_pylist() != eda[1]["uid"].to_pylist()  # another seed draws other candidates
    selected = {r["uid"] for r in catalog_rows(cache, "SELECT uid FROM augmented WHERE round = 0 AND selected")}
    assert set(epida["uid"].to_pylist()) == selected


def test_back_translation_candidates_come_from_the_configured_paraphraser(prefect_harness, tmp_path_factory):
    """sources: [back_translation] with a Hugging Face seq2seq paraphraser (the tiny Marian of
    tests/models/test_nmt_transformers.py): at most K·m distinct draws per row, each traced to the generator."""
    from flows.pipelines.epida import epida_flow
    from tests.models.test_nmt_transformers import tiny_marian_dir

    data, cache = tmp_path_factory.mktemp("bt-data"), tmp_path_factory.mktemp("bt-cache")
    write_demo(data, seed=6, bitext_rows=10, mono_rows=10, labeled_rows=40, slots_rows=10, test_rows=20)
    model = tiny_marian_dir(tmp_path_factory)
    conf = load_profile(
        REPO / "conf" / "demo.yaml",
        [
            "shard_size=50",
            "pipelines=[epida]",
            "epida.sources=[back_translation]",
            "epida.online=false",
            f"epida.amplification={K}",
            f"epida.m={M}",
            "epida.pretrain_epochs=1",
            "epida.epochs=1",
            "paraphrase.generator.kind=hf",
            f"paraphrase.generator.model={model}",
            "paraphrase.generator.threads=1",
        ],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )
    summary = epida_flow(conf, profile="test")
    per_row = catalog_rows(
        cache,
        "SELECT parent_uid, count(*) AS n, count(*) FILTER (WHERE selected) AS kept, "
        "count(DISTINCT text) AS texts FROM augmented GROUP BY parent_uid",
    )
    assert per_row and all(0 < r["n"] <= K * M and r["texts"] == r["n"] and r["kept"] == min(M, r["n"]) for r in per_row)
    assert {c["method"] for c in summary["epida"]["counts"]} == {"back_translation"}
    generated = catalog_rows(
        cache, "SELECT count(*) AS n FROM augmented a JOIN labeled l ON l.uid = a.parent_uid WHERE a.text = l.text"
    )[0]["n"]
    assert generated == 0  # a candidate is never its input
    stage = next(s for s in summary["stages"] if s["stage"] == "paraphrase_candidates")
    models = catalog_rows(cache, f"SELECT parent FROM lineage WHERE child = '{stage['fingerprint']}'")
    fp = catalog_rows(cache, "SELECT fingerprint FROM models WHERE name = 'paraphraser'")[0]["fingerprint"]
    assert fp in {m["parent"] for m in models}


def test_cwe_candidates_come_from_the_configured_masked_lm(prefect_harness, tmp_path_factory, mlm_dir):  # noqa: F811
    """sources: [cwe] with the tiny random BERT of tests/pipelines/epida/test_cwe.py: K·m per row scored, m kept, each
    candidate stage traced to the masked LM."""
    from flows.pipelines.epida import epida_flow

    data, cache = tmp_path_factory.mktemp("cwe-data"), tmp_path_factory.mktemp("cwe-cache")
    write_demo(data, seed=7, bitext_rows=10, mono_rows=10, labeled_rows=40, slots_rows=10, test_rows=20)
    conf = load_profile(
        REPO / "conf" / "demo.yaml",
        [
            "shard_size=50",
            "pipelines=[epida]",
            "epida.sources=[cwe]",
            "epida.online=false",
            f"epida.amplification={K}",
            f"epida.m={M}",
            "epida.pretrain_epochs=1",
            "epida.epochs=1",
            f"epida.cwe.model={mlm_dir}",
            "epida.cwe.threads=1",
            "epida.cwe.alpha=0.2",
        ],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )
    summary = epida_flow(conf, profile="test")
    per_row = catalog_rows(
        cache, "SELECT parent_uid, count(*) AS n, count(*) FILTER (WHERE selected) AS kept FROM augmented GROUP BY parent_uid"
    )
    assert per_row and {(r["n"], r["kept"]) for r in per_row} == {(K * M, M)}
    assert {c["method"] for c in summary["epida"]["counts"]} == {"cwe"}
    stage = next(s for s in summary["stages"] if s["stage"] == "cwe")
    fp = catalog_rows(cache, "SELECT fingerprint FROM models WHERE name = 'cwe'")[0]["fingerprint"]
    assert fp in {r["parent"] for r in catalog_rows(cache, f"SELECT parent FROM lineage WHERE child = '{stage['fingerprint']}'")}

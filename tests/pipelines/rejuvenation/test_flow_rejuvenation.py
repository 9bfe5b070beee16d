"""Rejuvenation end to end on the demo corpus, under Prefect, with tiny fairseq models: the row accounting, the
inactive pairs' drops and traces, both directions, the report, a cached rerun. That a student trained on the
rejuvenated pairs learns (200-update models throughout) is tests/e2e/test_rejuvenated_student.py, in `make test-e2e`."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.catalog import Catalog
from tests.conftest import REPO, subprocess_env

pytestmark = pytest.mark.slow

# Transformers with one layer a side and no dropout: they learn the demo grammar in 200 updates as the default two
# layers with dropout 0.1 do, at about 60 % of their CPU time. What this module checks holds for any model that
# scores its pairs (relations between rows, not quality): 100 updates (the models' BLEU on their own data is above 0,
# which is checked); the student that must learn from the rejuvenated pairs needs 200-update models (the e2e test).
UPDATES = 100


def tiny(updates: int) -> list[str]:
    """The overrides of this module's models: ``updates`` each, one layer a side, no dropout, no weak-model gate."""
    return [
        "rejuvenation.rejuvenator=active",
        "rejuvenation.identification.inference=native",
        *(
            f"{model}.train.{setting}"
            for model in ("rejuvenation.identification", "rejuvenation.rejuvenation", "train_nmt.student")
            for setting in (f"max_update={updates}", "encoder_layers=1", "decoder_layers=1", "dropout=0.0")
        ),
        *(f"rejuvenation.{m}.min_bleu=0" for m in ("identification", "rejuvenation")),  # tiny models: no gate
    ]


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("rj-demo-data")
    write_demo(root, seed=7, bitext_rows=1200, mono_rows=200, labeled_rows=100, slots_rows=100)
    return root


def _conf(cache, data, *sets, updates=UPDATES):
    return load_profile(
        REPO / "conf" / "demo.yaml",
        ["shard_size=400", "pipelines=[rejuvenation]", *tiny(updates), *sets],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )


@pytest.fixture(scope="module")
def first_run(prefect_harness, demo_root, tmp_path_factory):
    from flows.pipelines.rejuvenation import rejuvenation_flow

    cache = tmp_path_factory.mktemp("rj-cache")
    return cache, rejuvenation_flow(_conf(cache, demo_root), profile="test")


def _one(cat: Catalog, sql: str):
    return cat.query(sql).to_pylist()[0]


def test_row_accounting_active_plus_inactive_is_the_input(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    n = _one(cat, "SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")["n"]
    rj = summary["rejuvenation"]
    assert rj["active"] + rj["inactive"] == n
    assert rj["unscored"]["count"] == _one(cat, "SELECT count(*) AS n FROM pair_scores WHERE prob IS NULL")["n"]
    scored = n - rj["unscored"]["count"]
    assert rj["inactive"] == math.floor(0.1 * scored)
    assert rj["rejuvenated"] == rj["active"] + rj["inactive"]
    assert _one(cat, "SELECT count(*) AS n FROM inactive")["n"] == rj["inactive"]
    # inactive = the lowest probabilities: every inactive pair scores at most every scored active pair
    worst_active = _one(
        cat, "SELECT min(s.prob) AS p FROM pair_scores s ANTI JOIN inactive USING (uid) WHERE s.prob IS NOT NULL"
    )["p"]
    assert _one(cat, "SELECT max(prob) AS p FROM inactive")["p"] <= worst_active


def test_inactive_pairs_are_the_active_sides_drops_in_the_dropped_view_and_why(first_run, tmp_path):
    cache, summary = first_run
    cat = Catalog(cache)
    drops = cat.query(
        "SELECT d.uid, d.source, d.line, d.detail, i.prob FROM dropped d JOIN inactive i USING (uid) "
        "WHERE d.stage = 'active' AND d.reason = 'inactive' ORDER BY d.line"
    ).to_pylist()
    assert len(drops) == summary["rejuvenation"]["inactive"] > 0
    assert _one(cat, "SELECT count(*) AS n FROM dropped WHERE stage = 'active'")["n"] == len(drops)
    assert all(d["detail"] == f"prob={d['prob']:.6g}" for d in drops)
    # the README's accounting: the active artifact's input (the clean bitext) = active + dropped
    n = _one(cat, "SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")["n"]
    assert (
        _one(cat, "SELECT rows FROM artifacts WHERE stage = 'active' ORDER BY created_at DESC LIMIT 1")["rows"] + len(drops) == n
    )
    first = drops[0]
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "why", first["source"], str(first["line"]), "--cache", str(cache)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=subprocess_env(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert f"  active: dropped, inactive: {first['detail']}  (run {summary['run_id']})" in said, said
    derived = next(line for line in said if line.startswith("  derived rows: "))
    assert "rejuvenated 1" in derived.split(": ", 1)[1].split(", "), said  # its new pair


def test_every_rejuvenated_row_traces_back_to_its_inactive_parent_and_model(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    rows = cat.query(
        "SELECT r.*, i.src AS parent_src, i.prob AS parent_prob FROM rejuvenated r "
        "LEFT JOIN inactive i ON r.parent_uid = i.uid WHERE r.origin = 'rejuvenated'"
    ).to_pylist()
    assert len(rows) == summary["rejuvenation"]["inactive"]
    models = {r["fingerprint"]: r for r in cat.query("SELECT fingerprint, name, kind FROM models").to_pylist()}
    forward = summary["rejuvenation"]["models"]["forward"]
    assert models[forward]["name"] == "rejuvenation_ct2" and models[forward]["kind"] == "ctranslate2"
    for r in rows:
        assert r["src"] == r["parent_src"] and r["prob"] == r["parent_prob"]
        assert r["model"] == forward and r["direction"] == "forward"
        assert r["rejuvenated_prob"] is not None and 0 < r["rejuvenated_prob"] <= 1
    originals = _one(cat, "SELECT count(*) AS n FROM rejuvenated WHERE origin = 'original' AND parent_uid IS NULL")
    assert originals["n"] == summary["rejuvenation"]["active"]


def test_both_models_scores_on_their_data_lead_the_summary_lines(first_run):
    from flows.engine import registry

    cache, summary = first_run
    v = summary["rejuvenation"]["validation"]
    assert [(k, m["model"], m["dataset"], m["sentences"], m["trained_on_it"]) for k, m in v.items()] == [
        ("identification", "identification", "demo_bitext", 200, True),
        ("rejuvenation", "rejuvenation", "demo_bitext's active pairs", 200, True),
    ]
    rows = (
        Catalog(cache)
        .query(
            f"SELECT model_name, metric, score FROM evaluations WHERE run_id = '{summary['run_id']}' ORDER BY model_name, metric"
        )
        .to_pylist()
    )
    assert rows == [
        {"model_name": role, "metric": metric, "score": pytest.approx(v[role][metric])}
        for role in ("identification", "rejuvenation")
        for metric in ("BLEU", "chrF")
    ]
    assert all(0 < m["BLEU"] <= 100 for m in v.values())
    ident, rejuv = v["identification"], v["rejuvenation"]
    assert registry.summary_lines(summary)[:2] == [
        (
            f"identification: BLEU = {ident['BLEU']:.2f}, chrF = {ident['chrF']:.2f} on 200 pairs of `demo_bitext` "
            "(its training data: an upper bound)"
        ),
        (
            f"rejuvenation: BLEU = {rejuv['BLEU']:.2f}, chrF = {rejuv['chrF']:.2f} on 200 pairs of "
            "`demo_bitext's active pairs` (its training data: an upper bound)"
        ),
    ]


def test_report_has_ten_bins_and_both_states(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    bins = cat.query("SELECT * FROM probability_bins ORDER BY bin").to_pylist()
    assert [b["bin"] for b in bins] == list(range(1, 11))
    assert [b["p_mean"] for b in bins] == sorted(b["p_mean"] for b in bins)
    states = {r["state"]: r for r in cat.query("SELECT * FROM rejuvenation_states").to_pylist()}
    assert states["inactive"]["rows"] == summary["rejuvenation"]["inactive"]
    assert states["inactive"]["prob"] < states["active"]["prob"]
    assert 0 < states["active"]["coverage"] <= 1 and states["active"]["uncertainty"] is not None
    with open(summary["reports"]["rejuvenation_html"], encoding="utf-8") as f:
        page = f.read()
    assert "data:image/png;base64," in page and "Inactive vs active" in page


def test_cached_rerun_trains_and_recomputes_nothing(first_run, demo_root):
    from flows.pipelines.rejuvenation import rejuvenation_flow

    cache, first = first_run
    again = rejuvenation_flow(_conf(cache, demo_root), profile="test")
    assert {s["status"] for s in again["stages"]} == {"cached"}
    assert again["rejuvenation"] == first["rejuvenation"]


def test_both_directions_add_a_back_translated_pair_per_inactive_one(first_run, demo_root):
    from flows.pipelines.rejuvenation import rejuvenation_flow

    cache, first = first_run
    summary = rejuvenation_flow(_conf(cache, demo_root, "rejuvenation.direction=both"), profile="test")
    rj = summary["rejuvenation"]
    assert (rj["active"], rj["inactive"]) == (first["rejuvenation"]["active"], first["rejuvenation"]["inactive"])
    assert rj["rejuvenated"] == rj["active"] + 2 * rj["inactive"]
    computed = {s["stage"] for s in summary["stages"] if s["status"] == "computed"}
    assert "pair_score" not in computed and "rejuvenation_backward" in computed  # only the new model and its rows
    rows = (
        Catalog(cache)
        .query(
            "SELECT r.direction, r.src, r.tgt, r.model, i.src AS psrc, i.tgt AS ptgt FROM rejuvenated r "
            "JOIN inactive i ON r.parent_uid = i.uid"
        )
        .to_pylist()
    )
    assert sorted(r["direction"] for r in rows) == ["backward"] * rj["inactive"] + ["forward"] * rj["inactive"]
    for r in rows:  # forward keeps the source, backward keeps the target; each names its model
        assert (r["src"] == r["psrc"]) if r["direction"] == "forward" else (r["tgt"] == r["ptgt"])
        assert r["model"] == rj["models"][r["direction"]]

"""The c2c and train_slot_tagger pipelines end to end on the demo slots, under Prefect: delexicalisation
(a planted malformed row rejected with its file and line), cluster pairs, a tiny generator per fold,
cross expansion, selection, Table 5; then Bi-LSTM taggers on original vs original + c2c over two seeds."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from conf.loader import load_profile
from demo import write_demo
from tasks.c2c.delex import delexicalise_row
from tasks.c2c.diversity import diversity
from tests.conftest import REPO, catalog_rows

pytestmark = pytest.mark.slow

FOLDS, OUTPUTS = 2, 4
SLOTS_ROWS = 200  # two shards of 150
# 2-epoch generators write word salad up to the length cap: 16 tokens instead of 40 halve the sampling. A one-layer
# tagger without dropout learns in 2 epochs (span F1 0.3-0.55, where 3 epochs of the default two layers gave 0)
SETS = [
    "shard_size=150",
    "pipelines=[c2c, train_slot_tagger]",
    "c2c.dataset=demo_slots",  # the demo slots this test plants a malformed row in (the demo trains on demo_slots_small)
    "train_slot_tagger.dataset=demo_slots",
    "train_slot_tagger.test=demo_slots_test",
    "c2c.cluster_size=3",
    f"c2c.folds={FOLDS}",
    f"c2c.n_outputs={OUTPUTS}",
    "c2c.max_tokens=16",
    "c2c.model.epochs=2",
    "c2c.model.d_model=32",
    "c2c.model.threads=1",
    "train_slot_tagger.seeds=[0, 1]",
    "train_slot_tagger.tagger.epochs=2",
    "train_slot_tagger.tagger.layers=1",
    "train_slot_tagger.tagger.dropout=0",
    "train_slot_tagger.tagger.lr=0.02",
    "train_slot_tagger.tagger.batch_size=16",
    "train_slot_tagger.tagger.embedding_dim=16",
    "train_slot_tagger.tagger.hidden=16",
    "c2c.parallel=1",  # one at a time in this process (the demo profile's 2: in forks, the last test)
    "train_slot_tagger.parallel=1",
]
MALFORMED = {"tokens": ["fly", "to", "paris"], "tags": ["O", "O", "I-toloc.city_name"]}


@pytest.fixture(scope="module")
def runs(prefect_harness, tmp_path_factory):
    from flows.pipelines.c2c import c2c_flow
    from flows.pipelines.train_slot_tagger import train_slot_tagger_flow

    data, cache = tmp_path_factory.mktemp("c2c-data"), tmp_path_factory.mktemp("c2c-cache")
    paths, _ = write_demo(data, seed=4, bitext_rows=100, mono_rows=100, labeled_rows=100, slots_rows=SLOTS_ROWS, test_rows=60)
    with open(paths.slots, "a", encoding="utf-8") as f:  # line SLOTS_ROWS + 1: an I- tag that continues nothing
        f.write(json.dumps(MALFORMED) + "\n")
    held_out = [  # the demo profile's taggers read demo_slots_small: this test's held-out set is the one of demo_slots
        f"datasets.demo_slots_test={{kind: slots, format: jsonl, path: {paths.slots_test}}}",
        "heldout.allow_overlap=[demo_slots_test]",
    ]
    conf = load_profile(REPO / "conf" / "demo.yaml", [*SETS, *held_out], cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})
    return cache, conf, paths, c2c_flow(conf, profile="test"), train_slot_tagger_flow(conf, profile="test")


def _stage(summary, name):
    return [s for s in summary["stages"] if s["stage"] == name]


def test_every_slots_row_is_delexicalised_rejected_or_dropped_with_a_reason(runs):
    cache, _, paths, summary, _ = runs
    cleaned = catalog_rows(cache, "SELECT count(*) AS n FROM slots WHERE source = 'demo_slots'")[0]["n"]
    c = summary["c2c"]
    assert c["delexicalised"] + c["malformed_bio"] + c["no_slots"] == cleaned
    assert (c["malformed_bio"], c["no_slots"]) == (1, 0)  # every demo template has a slot
    reject = catalog_rows(cache, "SELECT file, line, reason, detail FROM rejects WHERE reason = 'malformed_bio'")
    line = SLOTS_ROWS + 1
    assert reject == [
        {
            "file": paths.slots.name,
            "line": line,
            "reason": "malformed_bio",
            "detail": f"demo_slots:{line}: tags[2] = 'I-toloc.city_name' follows 'O': an I- tag must "
            "continue a B-/I- span of type 'toloc.city_name'",
        }
    ]


def test_cluster_pairs_follow_alg_1(runs):
    cache, conf, _, summary, _ = runs
    rows = catalog_rows(cache, "SELECT * FROM cluster_pairs")
    outputs = [r for r in rows if r["role"] == "output"]
    by_cluster: dict[str, list[int]] = {}
    for r in outputs:
        by_cluster.setdefault(r["cluster"], []).append(r["rank"])
    assert all(ranks == list(range(len(ranks))) and len(ranks) <= conf.c2c.max_outputs for ranks in by_cluster.values())
    assert all(r["distance"] >= conf.c2c.min_distance for r in outputs if r["rank"] > 0)  # the stop rule
    medoids = catalog_rows(
        cache, "SELECT cluster, count(*) FILTER (WHERE medoid) AS m FROM cluster_pairs WHERE role = 'input' GROUP BY cluster"
    )
    assert {r["m"] for r in medoids} == {1} and len(medoids) == summary["c2c"]["clusters"]
    # a pair never takes an output from its own input cluster, and every member is a delexicalised row
    own = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM cluster_pairs o JOIN cluster_pairs i ON o.cluster = i.cluster AND "
        "o.uid = i.uid AND o.role = 'output' AND i.role = 'input'",
    )[0]["n"]
    strays = catalog_rows(
        cache,
        "SELECT count(*) AS n FROM cluster_pairs p ANTI JOIN delexicalised d ON d.uid = p.uid AND "
        "d.text = p.text AND d.frame = p.frame",
    )[0]["n"]
    assert own == 0 and strays == 0
    assert sorted({r["fold"] for r in rows}) == list(range(FOLDS))


def test_generated_rows_are_new_relexicalised_and_trace_to_their_cluster_and_fold_model(runs):
    cache, _, _, summary, _ = runs
    gen = catalog_rows(cache, "SELECT * FROM c2c_generated")
    assert gen and len(gen) == summary["c2c"]["kept"]
    training = {r["text"] for r in catalog_rows(cache, "SELECT text FROM delexicalised")}
    assert not {g["delex"] for g in gen} & training and len({g["delex"] for g in gen}) == len(gen)
    pool = {
        (r["slot"], r["value"]) for r in catalog_rows(cache, "SELECT unnest(slot_values, recursive := true) FROM delexicalised")
    }
    for g in gen:
        delex, values = delexicalise_row(g["tokens"], g["tags"])  # valid BIO, and it round-trips
        assert delex == g["delex"].split() and set(values) <= pool
    folds = {r["cluster"]: r["fold"] for r in catalog_rows(cache, "SELECT DISTINCT cluster, fold FROM cluster_pairs")}
    models = {
        r["name"]: r["fingerprint"]
        for r in catalog_rows(cache, "SELECT name, fingerprint FROM models WHERE name LIKE 'c2c_fold_%'")
    }
    assert all(folds[g["parent_cluster"]] == g["fold"] and g["model"] == models[f"c2c_fold_{g['fold']}"] for g in gen)
    # every input cluster of every fold generated n_outputs: kept + dropped by reason
    c = summary["c2c"]
    assert c["generated"] == OUTPUTS * c["clusters"] == c["kept"] + sum(c["dropped"].values())
    chain = catalog_rows(
        cache,
        """
        WITH RECURSIVE up(fp) AS (SELECT fingerprint FROM artifacts WHERE view = 'c2c_generated'
                                  UNION SELECT l.parent FROM lineage l JOIN up ON l.child = up.fp)
        SELECT DISTINCT coalesce(a.stage, m.name) AS what FROM up LEFT JOIN artifacts a ON a.fingerprint = up.fp
        LEFT JOIN models m ON m.fingerprint = up.fp""",
    )
    assert {"c2c_select", "c2c_generate", "cluster_pairs", "delexicalise", "clean", "read", "c2c_fold_0", "c2c_fold_1"} <= {
        r["what"] for r in chain
    }


def test_table_5_diversity_equals_the_metrics_of_the_raw_generation(runs):
    cache, _, _, summary, _ = runs
    raw = [
        pq.read_table(p)
        for s in _stage(summary, "c2c_generate")
        for p in sorted((cache / "artifacts" / "c2c_generate" / s["fingerprint"]).glob("part-*.parquet"))
    ]
    delex = [d.split() for t in raw for d in t["delex"].to_pylist()]
    training = catalog_rows(cache, "SELECT delex, tokens FROM delexicalised")
    expected = diversity(delex, [r["delex"] for r in training])
    view = {r["level"]: r for r in catalog_rows(cache, "SELECT * FROM c2c_diversity")}
    for key, value in expected.items():
        assert view["delexicalised"][key] == pytest.approx(value, rel=1e-12, nan_ok=True)
    in_training = summary["c2c"]["dropped"].get("in_training", 0)  # the selection drops exactly these
    assert in_training == round((1 - view["delexicalised"]["inter_ratio"]) * view["delexicalised"]["generated"])
    relex = diversity([t for tab in raw for t in tab["tokens"].to_pylist()], [r["tokens"] for r in training])
    assert view["relexicalised"]["inter_med"] == pytest.approx(relex["inter_med"], rel=1e-12)


def test_taggers_per_arm_and_seed_with_f1_from_their_predictions(runs):
    from models.tagger import span_f1

    cache, _, _, c2c, tagged = runs
    rows = catalog_rows(cache, "SELECT arm, seed, metric, score FROM evaluations WHERE model_name = 'slot_tagger'")
    assert sorted({(r["arm"], r["seed"], r["metric"]) for r in rows}) == [
        (a, s, m) for a in ("original", "original+c2c") for s in (0, 1) for m in ("f1", "precision", "recall")
    ]
    for r in (r for r in rows if r["metric"] == "f1"):
        preds = catalog_rows(
            cache, f"SELECT tags, predicted FROM slot_predictions WHERE arm = '{r['arm']}' AND seed = {r['seed']}"
        )
        assert len(preds) == 60
        assert r["score"] == pytest.approx(span_f1([p["tags"] for p in preds], [p["predicted"] for p in preds]), rel=1e-12)
    arms = tagged["train_slot_tagger"]["arms"]
    assert arms["original+c2c"] == arms["original"] + c2c["c2c"]["kept"]


def test_taggers_trained_two_at_once_in_forks_are_the_same_models(runs, tmp_path):
    """``train_slot_tagger.parallel: 2``: each tagger trained in a process of its own, two at a time, on a copy of the
    cache without the fixture's taggers: every file of every tagger the bytes the fixture's (trained in this process,
    one after the other) has, and the same scores. (C2C's generators in forks: tests/models/test_in_fork.py, and the
    demo profile's c2c.parallel in `make test`'s tiny demo.)"""
    from flows.pipelines.train_slot_tagger import train_slot_tagger_flow

    cache, conf, *_ = runs
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy, ignore=shutil.ignore_patterns("server", "logs", "*.lock"))
    shutil.rmtree(copy / "models" / "slot_tagger")
    tagger = conf.train_slot_tagger.model_copy(update={"parallel": 2})
    again = train_slot_tagger_flow(conf.model_copy(update={"cache": copy, "train_slot_tagger": tagger}), profile="test")

    def files(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and "lock" not in p.name}

    ours, theirs = files(copy / "models" / "slot_tagger"), files(cache / "models" / "slot_tagger")
    assert len([name for name in ours if name.endswith(".safetensors")]) == 4 and ours.keys() == theirs.keys()
    assert [name for name in ours if ours[name] != theirs[name]] == []
    sql = "SELECT arm, seed, metric, score FROM evaluations WHERE model_name = 'slot_tagger' AND run_id = '{}' ORDER BY ALL"
    first = catalog_rows(cache, "SELECT max(run_id) AS r FROM runs WHERE pipeline = 'train_slot_tagger'")[0]["r"]
    assert catalog_rows(copy, sql.format(again["run_id"])) == catalog_rows(cache, sql.format(first))

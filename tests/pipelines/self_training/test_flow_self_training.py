"""The self-training pipeline's first half end to end on the demo corpus, under Prefect."""

from __future__ import annotations

import hashlib
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from conf.loader import load_profile
from demo import ambiguous_words, word_entropy, write_demo
from storage.catalog import Catalog
from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("st-demo-data")
    write_demo(root, seed=5, bitext_rows=3000, mono_rows=2000, labeled_rows=100, slots_rows=100)
    return root


def _conf(cache, data, *sets):  # shards of 1000 rows: the bitext in 3, the monolingual set in 2
    return load_profile(
        REPO / "conf" / "demo.yaml",
        # a 100-update teacher scores BLEU ~0.2: the gate (min_bleu 5) warns, as these tests are about the stages after it
        ["shard_size=1000", "self_training.teacher.train.max_update=100", "self_training.teacher.on_weak=warn", *sets],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )


def _run(conf):
    from flows.pipelines.self_training import self_training_flow

    return self_training_flow(conf, profile="test")


@pytest.fixture(scope="module")
def first_run(prefect_harness, demo_root, tmp_path_factory):
    cache = tmp_path_factory.mktemp("st-cache")
    return cache, _run(_conf(cache, demo_root))


def _teacher(cache) -> str:
    """The first run's teacher, configured by path (as a user's model): no second training in another cache."""
    return (
        "self_training.teacher.model=" + Catalog(cache).query("SELECT path FROM models WHERE name = 'teacher'")["path"][0].as_py()
    )


def _stages(summary):
    return {(s["stage"], s["dataset"]): s for s in summary["stages"]}


def test_highest_uncertainty_words_are_the_planted_ambiguous_ones(first_run):
    cache, _ = first_run
    planted = ambiguous_words()
    top = Catalog(cache).query(f"SELECT src, H FROM word_uncertainty ORDER BY H DESC LIMIT {len(planted)}").to_pylist()
    assert {r["src"] for r in top} == set(planted)
    truth = word_entropy()
    for r in top:  # the lexicon's entropy estimates the grammar's true one
        assert r["H"] == pytest.approx(truth[r["src"]], abs=0.08), r["src"]


def test_u_max_is_the_90th_percentile_of_the_bitext_source(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    u = cat.query("SELECT uncertainty FROM uncertainty WHERE source = 'demo_bitext'")["uncertainty"].to_numpy()
    clean = cat.query("SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")["n"][0].as_py()
    assert len(u) == clean
    stages = _stages(summary)
    # the mapped align reads each part's pairs and their word ids (align_ids), as link_counts reads bitext and align
    assert stages[("align", "demo_bitext")]["rows_in"] == 2 * clean
    assert stages[("sample", "demo_mono")]["rows_in"] == stages[("sample_keys", "demo_mono")]["rows_out"]["part"]
    assert summary["u_max"] == np.sort(u)[math.ceil(0.9 * len(u)) - 1]


def test_sample_size_probabilities_and_lineage(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    n_mono = cat.query("SELECT count(*) AS n FROM mono WHERE source = 'demo_mono'")["n"][0].as_py()
    rows = cat.query(
        "SELECT s.*, m.text AS mono_text, m.line AS mono_line FROM sampled_mono s LEFT JOIN mono m USING (uid) ORDER BY rank"
    ).to_pylist()
    assert len(rows) == math.floor(0.2 * n_mono)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r["text"] == r["mono_text"] and r["line"] == r["mono_line"] for r in rows)  # every row traces back
    u_max = summary["u_max"]
    assert all(0 < r["uncertainty"] < 2 * u_max and r["p"] > 0 for r in rows)
    # p is Eq. 6.6 over the whole monolingual set
    u_all = cat.query("SELECT uncertainty FROM uncertainty WHERE source = 'demo_mono'")["uncertainty"].to_numpy()
    w = np.where(u_all <= u_max, u_all, np.maximum(2 * u_max - u_all, 0)) ** 2
    u0 = rows[0]["uncertainty"]
    expected = (u0 if u0 <= u_max else 2 * u_max - u0) ** 2 / w.sum()
    assert rows[0]["p"] == pytest.approx(expected, rel=1e-12)


def test_bins_and_report(first_run):
    cache, summary = first_run
    bins = Catalog(cache).query("SELECT source, bin, rows, coverage FROM uncertainty_bins ORDER BY source, bin")
    assert bins["source"].to_pylist() == ["demo_bitext"] * 5 + ["demo_mono"] * 5
    assert bins["bin"].to_pylist() == [1, 2, 3, 4, 5] * 2
    assert all(c is not None and 0 < c <= 1 for c in bins["coverage"].to_pylist()[:5])  # from the alignment
    # the monolingual side: each sampled sentence force-aligned with the teacher's translation; a bin none
    # of whose sentences was sampled has no translation, hence no coverage
    sampled_bins = (
        Catalog(cache)
        .query(
            "SELECT DISTINCT b.bin FROM (SELECT uid, ntile(5) OVER (ORDER BY uncertainty, uid) AS bin FROM uncertainty "
            "WHERE source = 'demo_mono') b JOIN synthetic s ON s.parent_uid = b.uid ORDER BY b.bin"
        )["bin"]
        .to_pylist()
    )
    mono = bins["coverage"].to_pylist()[5:]
    assert sampled_bins and [i + 1 for i, c in enumerate(mono) if c is not None] == sampled_bins
    assert all(0 < c <= 1 for c in mono if c is not None)
    with open(summary["reports"]["uncertainty_html"], encoding="utf-8") as f:
        html = f.read()
    assert "data:image/png;base64," in html and f"{summary['u_max']:.6f}" in html
    with open(summary["reports"]["uncertainty_png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _part_hashes(cache, stage):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((cache / "artifacts" / stage).rglob("*.parquet"))}


def test_rerun_is_cached_and_a_deleted_part_is_recomputed_alone(first_run, demo_root):
    cache, summary = first_run
    before = _part_hashes(cache, "sampled_mono")
    again = _run(_conf(cache, demo_root))
    assert {s["status"] for s in again["stages"]} == {"cached"}
    scored = _stages(summary)[("uncertainty", "demo_mono")]
    victim = cache / "artifacts" / "uncertainty" / scored["fingerprint"] / "part-00001.parquet"  # of 2
    victim.unlink()
    third = _stages(_run(_conf(cache, demo_root)))
    assert third[("uncertainty", "demo_mono")]["shards_computed"] == 1
    assert third[("sample_keys", "demo_mono")]["status"] == "cached"  # same bytes, same fingerprint downstream
    assert victim.exists() and _part_hashes(cache, "sampled_mono") == before


def test_sample_is_the_same_with_another_shard_size(first_run, demo_root, tmp_path):
    cache, _ = first_run
    other = _run(_conf(tmp_path, demo_root, "shard_size=700", _teacher(cache)))
    query = "SELECT uid, p, rank FROM sampled_mono ORDER BY rank"
    assert Catalog(tmp_path).query(query).equals(Catalog(cache).query(query))
    assert other["u_max"] == first_run[1]["u_max"]


needs_lmplz = pytest.mark.skipif(
    shutil.which("lmplz", path=str(Path(sys.executable).parent)) is None and shutil.which("lmplz") is None,
    reason="no lmplz: `make kenlm` builds it",
)


@needs_lmplz
def test_synthetic_filters_drop_length_ratio_and_exactly_the_lm_worst_share(first_run, demo_root, prefect_harness):
    """The second half's filters, run here on the bitext standing in for the synthetic pairs."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.pipelines.self_training import filter_synthetic, train_lm

    cache, summary = first_run
    conf = _conf(cache, demo_root)
    bitext = _stages(summary)[("clean", "demo_bitext")]

    @flow
    def filters():
        from storage.artifacts import ArtifactRef

        run = Run.start(conf, pipeline="test-filters", profile="test", config={})
        pairs = ArtifactRef(str(cache.absolute()), "clean", bitext["fingerprint"], "bitext", "demo_bitext", bitext["shards"])
        lm = train_lm(run, pairs, column="tgt", conf=conf.self_training, name="target_lm")
        out = filter_synthetic(run, pairs, conf.self_training, lm)
        run.finish()
        return run, out

    run, out = filters()
    by_stage = {r.stage: r for r in run.reports}
    n_in = bitext["rows_out"]["part"]
    kept_by_length = by_stage["synthetic_clean"].rows_out["part"]
    assert by_stage["synthetic_clean"].rows_out.get("dropped", 0) + kept_by_length == n_in
    lm = by_stage["lm_filter"].rows_out
    assert lm["dropped"] == math.floor(0.2 * kept_by_length) and lm["part"] + lm["dropped"] == kept_by_length
    scores = Catalog(cache).query(
        "SELECT max(cross_entropy) AS worst_kept "
        f"FROM read_parquet('{cache}/artifacts/lm_score/*/part-*.parquet') s "
        f"WHERE uid IN (SELECT uid FROM read_parquet('{out.dir}/part-*.parquet'))"
    )
    dropped = Catalog(cache).query(
        f"SELECT min(lm_cross_entropy) AS best_dropped, count(*) FILTER (reason = 'lm_score') AS n "
        f"FROM read_parquet('{out.dir}/dropped-*.parquet')"
    )
    assert dropped["n"][0].as_py() == lm["dropped"]
    assert dropped["best_dropped"][0].as_py() >= scores["worst_kept"][0].as_py()
    models = Catalog(cache).query("SELECT kind, count(*) AS n FROM models GROUP BY kind ORDER BY kind").to_pylist()
    assert models == [{"kind": "fairseq", "n": 1}, {"kind": "fast_align", "n": 1}, {"kind": "kenlm", "n": 1}]


def test_lexicon_counted_per_part_equals_every_link_counted_at_once_issue_51(first_run, demo_root, prefect_harness, tmp_path):
    """`link_counts` mapped over the bitext in 3 parts and in one: the same `lexicon` rows, to the last bit of p, as
    every link of `alignments` counted at once; `force_align` mapped: a part per part of the synthetic pairs."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.pipelines.ingest import ingest_dataset
    from flows.pipelines.self_training import bitext_uncertainty
    from models.lexicon import build_lexicon, linked_words, tokenize

    cache, summary = first_run
    query = "SELECT * FROM lexicon ORDER BY src, count DESC, tgt"
    lexicon = Catalog(cache).query(query)
    rows = Catalog(cache).query(
        "SELECT b.src, b.tgt, a.src_pos, a.tgt_pos FROM alignments a JOIN bitext b USING (uid) ORDER BY a.line"
    )
    offsets = np.asarray(rows["src_pos"].combine_chunks().offsets, np.int64)
    at_once = build_lexicon(
        linked_words(
            tokenize(rows["src"]),
            tokenize(rows["tgt"]),
            offsets,
            rows["src_pos"].combine_chunks().flatten().to_numpy(),
            rows["tgt_pos"].combine_chunks().flatten().to_numpy(),
        )
    )
    assert lexicon.equals(at_once) and lexicon.num_rows > 100
    stages = _stages(summary)
    assert stages[("link_counts", "demo_bitext")]["shards"] == stages[("align", "demo_bitext")]["shards"] == 3
    conf = _conf(tmp_path, demo_root, "shard_size=5000")

    @flow
    def one_part():
        with Run.started(conf, pipeline="test-lexicon", profile="test", config={}) as run:
            bitext_uncertainty(run, ingest_dataset(run, conf, "demo_bitext"), conf.self_training)
            return {(r.stage, r.dataset): r for r in run.reports}

    one = one_part()
    assert (one[("link_counts", "demo_bitext")].shards, one[("link_counts", "demo_bitext")].status) == (1, "computed")
    assert Catalog(tmp_path).query(query).equals(lexicon)
    aligned, synthetic = stages[("force_align", "demo_mono")], stages[("teacher_translate", "demo_mono")]
    assert aligned["shards"] == synthetic["shards"] == 2
    assert aligned["rows_in"] == aligned["rows_out"]["part"] == summary["synthetic"]["demo_mono"]


def test_teacher_translates_the_sample_into_synthetic_pairs_with_lineage(first_run):
    cache, summary = first_run
    cat = Catalog(cache)
    teacher = cat.query("SELECT fingerprint FROM models WHERE name = 'teacher'")["fingerprint"][0].as_py()
    rows = cat.query("SELECT s.*, m.text FROM synthetic s LEFT JOIN sampled_mono m ON s.parent_uid = m.uid").to_pylist()
    sampled = cat.query("SELECT count(*) AS n FROM sampled_mono")["n"][0].as_py()
    assert summary["synthetic"] == {"demo_mono": len(rows)}
    assert 0 < len(rows) <= sampled
    assert all(r["src"] == r["text"] and r["model"] == teacher and r["tgt"] for r in rows)  # every pair traces back
    stages = _stages(summary)
    translated = stages[("teacher_translate", "demo_mono")]["rows_out"]["part"]
    clean = stages[("synthetic_clean", "demo_mono")]["rows_out"]
    lm = stages[("lm_filter", "demo_mono")]["rows_out"]
    assert translated == sampled and clean["part"] + clean.get("dropped", 0) == translated
    assert lm["dropped"] == math.floor(0.2 * clean["part"]) and lm["part"] == len(rows)


def test_teacher_score_on_its_bitext_sample_is_in_the_summary_line_and_report(first_run):
    from sacrebleu.metrics import BLEU, CHRF

    from flows.engine import registry

    cache, summary = first_run
    cat = Catalog(cache)
    teacher = summary["model_scores"]["teacher"]
    sample = cat.query("SELECT uid FROM bitext WHERE source = 'demo_bitext' ORDER BY md5(uid), uid LIMIT 200")
    path = cat.query("SELECT path FROM artifacts WHERE stage = 'translate_validation'")["path"][0].as_py()
    hyps = cat.query(f"SELECT * FROM read_parquet('{Path(cache) / path}/part-*.parquet')").to_pylist()
    assert [h["uid"] for h in hyps] == sample["uid"].to_pylist()  # the 200 smallest md5(uid), in that order
    bleu = BLEU().corpus_score([h["hyp"] for h in hyps], [[h["ref"] for h in hyps]]).score
    chrf = CHRF().corpus_score([h["hyp"] for h in hyps], [[h["ref"] for h in hyps]]).score
    assert (teacher["BLEU"], teacher["chrF"], teacher["sentences"], teacher["trained_on_it"]) == (
        pytest.approx(bleu),
        pytest.approx(chrf),
        200,
        True,
    )
    line = f"teacher: BLEU = {bleu:.2f}, chrF = {chrf:.2f} on 200 pairs of `demo_bitext` (its training data: an upper bound)"
    assert registry.summary_lines(summary)[:2] == [f"U_max = {summary['u_max']:.6f}", line]
    rows = cat.query(
        "SELECT metric, testset, sentences, score FROM evaluations WHERE model_name = 'teacher' "
        f"AND run_id = '{summary['run_id']}' ORDER BY metric"
    ).to_pylist()
    assert rows == [
        {"metric": "BLEU", "testset": "demo_bitext (validation sample)", "sentences": 200, "score": pytest.approx(bleu)},
        {"metric": "chrF", "testset": "demo_bitext (validation sample)", "sentences": 200, "score": pytest.approx(chrf)},
    ]
    assert line in Path(summary["reports"]["uncertainty_html"]).read_text(encoding="utf-8")


@needs_lmplz
def test_source_lm_baseline_takes_the_lowest_cross_entropy(first_run, demo_root, tmp_path):
    cache, _ = first_run
    copy = tmp_path / "cache"  # a copy of the first run's cache: its ingest, alignment, scores and teacher are
    shutil.copytree(cache, copy)  # cached there, and this run computes the source LM's sample and what follows it
    summary = _run(_conf(copy, demo_root, "self_training.sampling.method=srclm", "self_training.sampling.budget=50"))
    assert _stages(summary)[("sampled_mono", "demo_mono")]["status"] == "computed"
    cat = Catalog(copy)
    fp = next(s["fingerprint"] for s in summary["stages"] if s["stage"] == "lm_score")  # the source LM's, not the filter's
    best = cat.query(
        f"SELECT uid FROM read_parquet('{copy}/artifacts/lm_score/{fp}/part-*.parquet') ORDER BY cross_entropy, uid DESC LIMIT 50"
    )["uid"].to_pylist()
    assert sorted(cat.query("SELECT uid FROM sampled_mono")["uid"].to_pylist()) == sorted(best)
    assert set(cat.query("SELECT method FROM sampled_mono")["method"].to_pylist()) == {"srclm"}

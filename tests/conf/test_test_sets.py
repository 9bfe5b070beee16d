"""Held-out test and dev sets are read and validated, never cleaned (issue 26, defect 3): a score on a test set is
a score on its file as it is. conf/roles.py (what each key uses a dataset for), flows/pipelines/ingest.py, tasks/ingest/clean.py
(`keep_valid`), conf/sections/cleaning.py (a dataset's own ``clean:``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ConfError
from conf.loader import load_profile
from tests.conftest import catalog_rows, subprocess_env

AUGDAG = [sys.executable, "-m", "flows.cli"]
# a test set as WMT's are: a sentence repeated (lines 3 and 6 copy line 1) and a pair whose lengths differ 9:1
PAIRS = [
    ("the old man walks to the market", "der alte mann geht zum markt"),
    ("we eat bread and cheese every morning", "wir essen jeden morgen brot und käse"),
    ("the old man walks to the market", "der alte mann geht zum markt"),
    ("yes", "ja das ist ganz genau so wie du es sagst"),
    ("my sister reads a long book tonight", "meine schwester liest heute abend ein langes buch"),
    ("the old man walks to the market", "der alte mann geht zum markt"),
]
HYP = {  # a fixed system output per source sentence
    "the old man walks to the market": "der alte mann geht auf den markt",
    "we eat bread and cheese every morning": "wir essen brot und käse jeden morgen",
    "yes": "ja",
    "my sister reads a long book tonight": "meine schwester liest heute ein langes buch",
}
LABELED = "pos\ta fine day\nneg\ta bad day\npos\ta fine day\nno tab on this line\nneg\tx\n"  # line 4: 1 column
PROFILE = """\
    pipelines: [ingest]
    shard_size: 2                  # the copies of line 1 in other shards than it
    datasets:
      test:  {kind: bitext, format: text, src: test.en, tgt: test.de}
      ltest: {kind: labeled, format: tsv, path: ltest.tsv, columns: [label, text]}
      train: {kind: bitext, format: text, src: test.en, tgt: test.de}   # the same files, not held out: cleaned
      raw:   {kind: bitext, format: text, src: test.en, tgt: test.de, clean: false}
      loose: {kind: bitext, format: text, src: test.en, tgt: test.de, clean: {max_ratio: 10}}
    train_nmt:
      tests: [test]
    train_classifier:
      test: ltest
    rejuvenation:
      bitext: raw                  # named: a training use, though rejuvenation is not enabled
    """


def _files(root: Path, profile: str = PROFILE) -> Path:
    (root / "test.en").write_text("".join(s + "\n" for s, _ in PAIRS), encoding="utf-8")
    (root / "test.de").write_text("".join(t + "\n" for _, t in PAIRS), encoding="utf-8")
    (root / "ltest.tsv").write_text(LABELED, encoding="utf-8")
    (root / "p.yaml").write_text(textwrap.dedent(profile), encoding="utf-8")
    return root / "p.yaml"


def _augdag(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AUGDAG, *args, "--cache", str(root / "cache")],
        cwd=root,
        env=subprocess_env(root, **env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def ingested(prefect_harness, tmp_path_factory) -> Path:
    """`augdag run ingest` over the profile, as a user runs it (reporting to the session harness's Prefect server:
    no temporary server of its own, ~20 CPU-s); the cache."""
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("test-sets")
    _files(root)
    done = _augdag(root, "run", "ingest", "--config", "p.yaml", PREFECT_API_URL=PREFECT_API_URL.value())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "cache"


def test_a_held_out_set_keeps_its_copies_and_long_pairs_and_clean_false_keeps_a_training_sets(ingested):
    lines = {
        r["source"]: r["lines"]
        for r in catalog_rows(
            ingested,
            "SELECT source, list(line ORDER BY line) AS lines FROM (FROM bitext UNION ALL FROM heldout_bitext) GROUP BY source",
        )
    }
    views = catalog_rows(
        ingested,
        "SELECT (SELECT list(DISTINCT source) FROM heldout_bitext) AS held, (SELECT list(DISTINCT source) FROM bitext) AS t",
    )[0]
    assert views["held"] == ["test"] and "test" not in views["t"]  # never in the view training reads (issue 47)
    assert lines == {
        "test": [1, 2, 3, 4, 5, 6],  # held out: every line, copies and the 9:1 pair included
        "train": [1, 2, 5],  # the same files cleaned: copies (3, 6) and the ratio (4) dropped
        "raw": [1, 2, 3, 4, 5, 6],  # clean: false
        "loose": [1, 2, 4, 5],
    }  # clean: {max_ratio: 10}: copies dropped, a ratio of 9 kept
    assert [
        r["line"] for r in catalog_rows(ingested, "SELECT line FROM heldout_labeled WHERE source = 'ltest' ORDER BY line")
    ] == [
        1,
        2,
        3,
        5,
    ]  # the copy (3) kept ...
    assert catalog_rows(ingested, "SELECT line, reason FROM rejects WHERE source = 'ltest'") == [
        {"line": 4, "reason": "column_count"}
    ]  # ... the broken row rejected, as in any dataset
    assert catalog_rows(
        ingested,
        "SELECT reason, list(line ORDER BY line) AS lines FROM dropped WHERE source = 'train' GROUP BY reason ORDER BY reason",
    ) == [{"reason": "duplicate", "lines": [3, 6]}, {"reason": "length_ratio", "lines": [4]}]
    assert catalog_rows(ingested, "SELECT count(*) AS n FROM dropped WHERE source IN ('test', 'ltest', 'raw')") == [{"n": 0}]
    stages = {
        (r["stage"], r["dataset"]): json.loads(r["params"])
        for r in catalog_rows(ingested, "SELECT stage, dataset, params FROM artifacts WHERE stage <> 'read'")
    }
    assert {k: v for k, v in stages.items() if v.get("cleans") is False} == {  # the fingerprint says it did not clean,
        ("clean", "raw"): {"cleans": False},  # and that a held-out set is held out (its view: heldout_<kind>)
        **{("clean", ds): {"cleans": False, "held_out": True} for ds in ("test", "ltest")},
    }
    assert sorted(ds for stage, ds in stages if stage == "duplicates") == ["loose", "train"]


def test_bleu_and_chrf_on_a_held_out_set_equal_sacrebleu_on_the_raw_reference_lines(ingested, monkeypatch):
    """train_nmt's scoring path on the held-out artifact: translate_test per shard (the students' stage, its model
    replaced by the fixed outputs HYP), then evaluate over every shard."""
    import sacrebleu

    from storage.artifacts import part_name
    from storage.parts import Parts
    from tasks.common import evaluation

    monkeypatch.setattr(evaluation, "translate_column", lambda src, **_: pa.array([HYP[s] for s in src.to_pylist()]))
    (art,) = catalog_rows(ingested, "SELECT path, n_shards FROM artifacts WHERE stage = 'clean' AND dataset = 'test'")
    parts = []
    for i in range(art["n_shards"]):
        rows = pq.read_table(ingested / art["path"] / part_name(i))  # relative to the cache, or absolute
        parts.append(ingested / f"translations-{i}.parquet")
        pq.write_table(evaluation.translate_test(rows, model=None, model_path=None, runtime=None, decode=None), parts[-1])
    scores = {r["metric"]: r for r in evaluation.evaluate(Parts(tuple(parts))).to_pylist()}
    refs = (ingested.parent / "test.de").read_text(encoding="utf-8").splitlines()
    hyps = [HYP[s] for s in (ingested.parent / "test.en").read_text(encoding="utf-8").splitlines()]
    assert (len(parts), len(refs), scores["BLEU"]["sentences"]) == (3, 6, 6)
    assert scores["BLEU"]["score"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert scores["chrF"]["score"] == sacrebleu.corpus_chrf(hyps, [refs]).score
    kept = [1, 2, 5]  # what cleaning would have scored: another number
    assert scores["BLEU"]["score"] != sacrebleu.corpus_bleu([hyps[i - 1] for i in kept], [[refs[i - 1] for i in kept]]).score


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            "self_training:\n  bitext: test\n",
            (
                "p.yaml:10: train_nmt.tests.0: dataset 'test' is held out for evaluation, but self_training.bitext trains on "
                "it: a score on data a model learnt from is not a held-out score. Hint: evaluate on another dataset, or train "
                "on another one"
            ),
        ),
        (
            "epida:\n  dataset: ltest\n",
            "p.yaml:12: train_classifier.test: dataset 'ltest' is held out for evaluation, but epida.dataset trains on it",
        ),
        (
            "datasets:\n  test: {kind: bitext, format: text, src: test.en, tgt: test.de, clean: {dedup: false}}\n",
            (
                "datasets.test.clean: 'test' is held out for evaluation (train_nmt.tests.0) and a held-out set is never "
                "cleaned: its scores are on the file as it is. Hint: remove `clean`"
            ),
        ),
    ],
    ids=["self_training", "epida", "own_clean"],
)
def test_a_held_out_set_that_is_trained_on_or_cleaned_is_one_line_exit_2(tmp_path, extra, message):
    profile = _files(tmp_path).read_text()
    if extra.startswith("datasets:"):  # the test set's own line replaced
        profile = profile.replace(
            "  test:  {kind: bitext, format: text, src: test.en, tgt: test.de}\n", extra.removeprefix("datasets:\n")
        )
    else:
        profile += extra
    (tmp_path / "p.yaml").write_text(profile)
    done = _augdag(tmp_path, "run", "ingest", "--config", "p.yaml")
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 2 and "Traceback" not in out and len(out.splitlines()) == 1, out
    assert message in out.replace("\n", "")
    assert not (tmp_path / "cache" / "artifacts").exists()


def test_the_demo_holds_out_its_three_test_sets_and_trains_on_none_of_them():
    from conf.roles import evaluation_datasets, training_datasets

    conf = load_profile("demo", [], environ={"AUGDAG_DEMO_DATA": "/nonexistent"})
    assert evaluation_datasets(conf) == {
        "demo_test": ["train_nmt.tests.0", "train_nmt.tests.1", "train_nmt.tests.2"],
        "demo_labeled_test": ["train_classifier.test", "epida.test"],
        "demo_slots_small_test": ["train_slot_tagger.test"],
    }
    assert training_datasets(conf) == {
        "demo_bitext": [
            "self_training.bitext",
            "rejuvenation.bitext",
            "paraphrase.generator.bitext",
            "mt_paraphrase.bitext",
            "robustness.bitext",
        ],
        "demo_mono": ["self_training.mono.0", "robustness.mono.0"],
        "demo_labeled": ["paraphrase.dataset", "train_classifier.dataset", "epida.dataset"],
        "demo_slots_small": ["c2c.dataset", "train_slot_tagger.dataset"],
    }


def test_an_unnamed_default_test_set_counts_only_when_its_pipeline_is_enabled(tmp_path):
    from conf.roles import evaluation_datasets

    (tmp_path / "b.tsv").write_text("a\tb\n")
    (tmp_path / "p.yaml").write_text("datasets:\n  b: {kind: bitext, format: tsv, path: b.tsv}\n")
    assert evaluation_datasets(load_profile(tmp_path / "p.yaml", [])) == {}  # ingest alone: b is cleaned
    conf = load_profile(tmp_path / "p.yaml", ["pipelines=[ingest, train_nmt]"])
    assert evaluation_datasets(conf) == {"b": ["train_nmt.test"]}  # train_nmt's default: the only bitext
    with pytest.raises(
        ConfError,
        match=r"train_nmt.test: dataset 'b' is held out for evaluation, but "
        r"rejuvenation.bitext trains on it",
    ):
        load_profile(tmp_path / "p.yaml", ["pipelines=[ingest, rejuvenation, train_nmt]"])  # both by default

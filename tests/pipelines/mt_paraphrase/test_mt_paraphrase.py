"""Constrained paraphrase augmentation for MT (issue 17, part 1): Jaccard, IDF and the constraint detector on
constructed text, the selection's rules and pairing, the constraints in fairseq's and transformers' decoders
(tiny models trained here), and the mt_paraphrase pipeline on the demo bitext (lineage, cache, resume)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.parts import Parts
from tasks.mt_paraphrase.constrained import (
    CANDIDATES,
    idf_table,
    in_share,
    jaccard,
    negative_tokens,
    positive_tokens,
    select_paraphrases,
    violation,
)
from tests.conftest import REPO, catalog_rows
from tests.models.test_nmt_fairseq import CONF, MADE_UP, PAIRS, made_up_pairs
from tests.models.test_nmt_transformers import marian_dir  # noqa: F401 — the module fixture


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("the cat sees a dog", "the dog sees a cat", 1.0),  # the same token set
        ("a b c", "a b d", 2 / 4),
        ("The Cat", "the cat", 1.0),  # lower-cased
        ("a b c d", "e f", 0.0),
        ("x y", "x y z w v", 2 / 5),
    ],
)
def test_token_jaccard_on_constructed_pairs(a, b, expected):
    assert jaccard(a, b) == expected


def test_idf_is_ln_n_over_document_frequency(tmp_path):
    table = pa.table({"src": ["the cat sat", "the dog", "The cat, the hat"], "tgt": ["x", "y", "z"]})
    idf = {r["token"]: (r["df"], r["idf"]) for r in idf_table(Parts.of_tables([table], tmp_path)).to_pylist()}
    assert idf == {
        "the": (3, 0.0),
        "cat": (2, math.log(3 / 2)),
        "sat": (1, math.log(3)),
        "dog": (1, math.log(3)),
        "hat": (1, math.log(3)),
    }


def test_constraints_keep_names_and_numbers_and_forbid_the_rarest_word():
    text = "Yesterday Anna bought 3 apples and a pear in Paris ."
    assert positive_tokens(text) == ["Anna", "3", "Paris"]  # "Yesterday" starts the sentence
    idf = {"yesterday": 2.0, "bought": 1.5, "apples": 2.5, "pear": 2.5, "anna": 9.0, "and": 0.1, "a": 0.1}
    assert negative_tokens(text, idf) == ["apples"]  # the highest idf that is not kept; ties: the earlier
    assert negative_tokens(text, idf, top=2) == ["apples", "pear"]
    assert negative_tokens("2024 , !", idf) == []  # nothing left to forbid
    assert violation("Anna bought 3 Apples in Paris", ["apples"], ["Anna", "3"]) == "negative_violated"
    assert violation("Anna bought three pears in Paris", ["apples"], ["Anna", "3"]) == "positive_missing"
    assert violation("Anna bought 3 pears, in Paris!", ["apples"], ["Anna", "3", "Paris"]) is None


def candidates(rows: list[tuple[str, str, str, str]], side: str = "src") -> pa.Table:
    """(parent_uid, original, other, paraphrase) rows with the constraints of the test."""
    n = len(rows)
    return pa.table(
        {
            "parent_uid": [r[0] for r in rows],
            "source": ["t"] * n,
            "line": pa.array([1] * n, pa.int64()),
            "side": [side] * n,
            "original": [r[1] for r in rows],
            "other": [r[2] for r in rows],
            "paraphrase": [r[3] for r in rows],
            "sample": pa.array(range(n), pa.int32()),
            "negative": [["bought"]] * n,
            "positive": [["Anna"]] * n,
            "model": ["m"] * n,
        },
        schema=CANDIDATES,
    )


ORIGINAL = "Anna bought two red apples today"  # 6 tokens


def test_selection_keeps_unique_constrained_paraphrases_below_the_jaccard_and_pairs_the_other_side():
    cands = candidates(
        [
            ("p", ORIGINAL, "Anna kaufte", "Anna got two red apples today"),  # J = 5/7 = 0.714: too close
            ("p", ORIGINAL, "Anna kaufte", "Anna purchased a pair of red apples"),  # J = 3/10: kept
            ("p", ORIGINAL, "Anna kaufte", "Anna purchased a pair of red apples"),  # a repeat
            ("p", ORIGINAL, "Anna kaufte", "Anna bought some fruit"),  # the banned word
            ("p", ORIGINAL, "Anna kaufte", "She purchased apples"),  # the name is gone
            ("p", ORIGINAL, "Anna kaufte", ""),
            ("p", ORIGINAL, "Anna kaufte", "Anna acquired fruit yesterday"),  # J = 1/9: kept
            ("p", ORIGINAL, "Anna kaufte", "Anna obtained some fruit"),  # over keep = 2
        ]
    )
    out = select_paraphrases(cands, max_jaccard=0.65, keep=2)
    kept = out["part"].to_pylist()
    assert [(r["src"], r["tgt"], r["sample"]) for r in kept] == [
        ("Anna purchased a pair of red apples", "Anna kaufte", 1),
        ("Anna acquired fruit yesterday", "Anna kaufte", 6),
    ]
    assert [r["jaccard"] for r in kept] == [3 / 10, 1 / 9]
    assert json.loads(kept[0]["constraints"]) == {"negative": ["bought"], "positive": ["Anna"]}
    assert out["dropped"]["reason"].to_pylist() == [
        "jaccard",
        "duplicate",
        "negative_violated",
        "positive_missing",
        "empty",
        "over_keep",
    ]
    assert out["dropped"]["jaccard"].to_pylist()[0] == 5 / 7
    assert out["part"].num_rows + out["dropped"].num_rows == cands.num_rows
    # the jaccard threshold is strict: J = 0.65 itself is dropped
    assert select_paraphrases(cands, max_jaccard=3 / 10)["part"]["sample"].to_pylist() == [6, 7]


def test_a_target_side_paraphrase_pairs_with_the_original_source():
    out = select_paraphrases(candidates([("p", ORIGINAL, "Anna kaufte Äpfel", "Anna acquired fruit")], side="tgt"))
    assert out["part"].select(["side", "src", "tgt"]).to_pylist() == [
        {"side": "tgt", "src": "Anna kaufte Äpfel", "tgt": "Anna acquired fruit"}
    ]


def test_in_share_takes_the_first_share_of_the_uid_space():
    uids = [f"{i:08x}" + "0" * 24 for i in range(0, 2**32, 2**28)]  # 16 evenly spread md5-like uids
    assert in_share(uids, 0.25) == [True] * 4 + [False] * 12
    assert in_share(uids, 1.0) == [True] * 16


# the fairseq model of tests/models/test_nmt_fairseq.py translates English words one by one into a made-up language
SENTENCES = [s for s, _ in made_up_pairs(24, seed=9) if not s.startswith("house")]  # "house" → "fibu" is required


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """That model with 150 updates instead of 200: enough that the beam finishes 4 hypotheses under the
    constraints for every sentence (it did with seeds 1-7; at 120 updates not with seed 4, at 60 not at all)."""
    from models.nmt import load_model
    from models.nmt.fairseq_train import train_fairseq

    out = train_fairseq(
        [s for s, _ in PAIRS],
        [t for _, t in PAIRS],
        tmp_path_factory.mktemp("fairseq") / "model",
        CONF.model_copy(update={"max_update": 150}),
        log=lambda line: None,
        threads=1,
        device="cpu",
    )
    return load_model(out, device="cpu", threads=1)


@pytest.mark.slow
def test_fairseq_constrained_beam_never_emits_a_banned_word_and_always_holds_a_required_one(model):
    banned = [[MADE_UP[s.split()[0]]] for s in SENTENCES]  # the translation of the sentence's first word
    plain = model.translate_constrained(SENTENCES, banned=[[]] * len(SENTENCES), required=[[]] * len(SENTENCES), beam=4, nbest=4)
    assert sum(b[0] in h.split() for b, hs in zip(banned, plain) for h in hs) > len(SENTENCES)  # the ban matters
    required = [["fibu"]] * len(SENTENCES)  # "house": in no source sentence's translation unless it has "house"
    out = model.translate_constrained(SENTENCES, banned=banned, required=required, beam=4, nbest=4)
    assert all(len(hs) == 4 for hs in out)
    assert model.translate_constrained(["house a dog"], banned=[["fibu"]], required=[["fibu"]], beam=4, nbest=4) == [
        []
    ]  # a contradiction finishes no hypothesis (the pipeline never bans a word it keeps)
    for b, hs in zip(banned, out):
        for h in hs:
            assert b[0] not in h.split() and "fibu" in h.split(), (b, h)


@pytest.mark.slow
def test_transformers_sampling_never_emits_a_banned_word(marian_dir):  # noqa: F811
    from models.generation import HFParaphraser, Sampler
    from tests.models.test_nmt_transformers import LEXICON
    from tests.models.test_nmt_transformers import made_up_pairs as marian_pairs

    texts = [s for s, _ in marian_pairs(12, seed=4)]
    banned = [[LEXICON[t.split()[0]]] for t in texts]
    para = HFParaphraser.load(marian_dir, device="cpu", threads=1)
    plan = [(Sampler(top_k=0, top_p=1.0, seed=3), 10)]
    free = para.generate(texts, plan)["top_k_top_p"]
    assert sum(b[0] in s.split() for b, ss in zip(banned, free) for s in ss) > len(texts)  # the ban matters
    out = para.generate(texts, plan, banned=banned)["top_k_top_p"]
    assert all(len(ss) == 10 for ss in out)
    assert not any(b[0] in s.split() for b, ss in zip(banned, out) for s in ss)


# --- the pipeline on the demo bitext, round trip with tiny fairseq models ---------------------------------

# 60-update models: poor paraphrases, but the claims below are about the constraints, the selection and the
# lineage, not quality; some candidates still copy enough of their original to be dropped by the Jaccard rule
TINY = [
    "shard_size=100",
    "pipelines=[mt_paraphrase]",
    "paraphrase.generator.forward.train.max_update=60",
    "paraphrase.generator.backward.train.max_update=60",
    "mt_paraphrase.bitext=demo_bitext",
    "mt_paraphrase.n=4",
    "mt_paraphrase.keep=3",
    "mt_paraphrase.share=0.25",
]


@pytest.fixture(scope="module")
def run(prefect_harness, tmp_path_factory):
    from flows.pipelines.mt_paraphrase import mt_paraphrase_flow

    data, cache = tmp_path_factory.mktemp("mtp-data"), tmp_path_factory.mktemp("mtp-cache")
    write_demo(data, seed=12, bitext_rows=300, mono_rows=100, labeled_rows=100, slots_rows=100, test_rows=50)
    conf = load_profile(REPO / "conf" / "demo.yaml", TINY, cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})
    return cache, conf, mt_paraphrase_flow(conf, profile="test")


@pytest.mark.slow
def test_paraphrased_pairs_keep_their_constraints_and_trace_to_their_pair(run):
    cache, _, summary = run
    rows = catalog_rows(
        cache,
        "SELECT p.*, b.src AS original, b.tgt AS original_tgt FROM paraphrased_bitext p "
        "JOIN bitext b ON b.uid = p.parent_uid AND b.source = p.source AND b.line = p.line",
    )
    assert rows and len(rows) == summary["mt_paraphrase"]["paraphrased"]
    assert len(rows) == catalog_rows(cache, "SELECT count(*) AS n FROM paraphrased_bitext")[0]["n"]  # no orphan
    for r in rows:
        assert r["tgt"] == r["original_tgt"] and r["side"] == "src"  # paired with the other side of its pair
        assert r["jaccard"] == jaccard(r["original"], r["src"]) < 0.65
        c = json.loads(r["constraints"])
        assert violation(r["src"], c["negative"], c["positive"]) is None
        assert c["positive"] == positive_tokens(r["original"]) and len(c["negative"]) <= 1
    per_pair = catalog_rows(
        cache, "SELECT parent_uid, count(*) AS n, count(DISTINCT src) AS d FROM paraphrased_bitext GROUP BY 1"
    )
    assert all(p["n"] == p["d"] <= 3 for p in per_pair)
    drawn = catalog_rows(cache, "SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")[0]["n"]
    m = summary["mt_paraphrase"]
    assert m["candidates"] == m["paraphrased"] + sum(m["dropped"].values()) and m["candidates"] <= 4 * drawn
    fp = catalog_rows(cache, "SELECT fingerprint FROM artifacts WHERE view = 'paraphrased_bitext'")[0]["fingerprint"]
    chain = catalog_rows(
        cache,
        f"""
        WITH RECURSIVE up(fp) AS (SELECT '{fp}' UNION SELECT l.parent FROM lineage l JOIN up ON l.child = up.fp)
        SELECT DISTINCT coalesce(a.stage, m.name) AS what FROM up LEFT JOIN artifacts a ON a.fingerprint = up.fp
        LEFT JOIN models m ON m.fingerprint = up.fp""",
    )
    assert {"constrained_paraphrases", "side_idf", "clean", "read", "paraphrase_backward"} <= {c["what"] for c in chain}


@pytest.mark.slow
def test_a_cached_rerun_computes_nothing_and_a_lost_shard_is_recomputed_alone(run):
    from flows.pipelines.mt_paraphrase import mt_paraphrase_flow
    from storage.artifacts import MANIFEST

    cache, conf, first = run
    again = mt_paraphrase_flow(conf, profile="test")
    assert {s["status"] for s in again["stages"]} == {"cached"}
    stage = next(s for s in first["stages"] if s["stage"] == "constrained_paraphrases")
    art = cache / "artifacts" / "constrained_paraphrases" / stage["fingerprint"]
    victim = sorted(art.glob("part-*.parquet"))[1]
    before = pq.read_table(victim)
    victim.unlink()
    (art / MANIFEST).unlink()
    resumed = mt_paraphrase_flow(conf, profile="test")
    redo = next(s for s in resumed["stages"] if s["stage"] == "constrained_paraphrases")
    assert (redo["status"], redo["shards_computed"]) == ("computed", 1)
    assert pq.read_table(victim).equals(before)
    assert resumed["mt_paraphrase"]["paraphrased"] == first["mt_paraphrase"]["paraphrased"]

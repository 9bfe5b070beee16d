"""models/similarity.py: chrF against sacrebleu itself, a tiny cross-encoder against its own logits, a tiny
sentence-transformers model against its own embeddings.

The models are randomly initialised one-layer BERTs (tests/models/test_nli.py's builders) saved to tmp and loaded
through the same code as a user's model: ``save_pretrained`` for the cross-encoder, ``SentenceTransformer.save``
for the embedding model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from test_nli import MAX_POSITIONS, pair_tokenizer, tiny_bert

from conf.errors import ModelError
from conf.offline import go_offline
from models.similarity import KINDS, ChrF, CrossEncoderSimilarity, EmbeddingSimilarity, Similarity, load_similarity
from storage.artifacts import hash_inputs

go_offline()  # HF_HUB_OFFLINE=1 and friends, unless the environment says otherwise

WORDS = ["ka", "lo", "mi", "tu", "re", "sa", "vo", "ni", "pe", "du", "go", "ba"]
REFS = ["ka lo mi", "tu re sa vo ni pe", "du", "go ba ka lo mi tu re", "sa vo", "ka lo mi"]
CANDS = ["lo ka mi", "tu re sa", "du go ba", "go ba ka lo mi tu re", "vo sa ni pe du go", "ka lo mi"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- chrF ---------------------------------------------------------------------------------------------------


def test_chrf_is_sacrebleus_sentence_chrf_over_100():
    pairs = [
        ("The cat sat on the mat.", "The cat is on the mat."),
        ("a b c", "c b a"),
        ("Paraphrases keep the meaning.", "A paraphrase keeps its meaning."),
        ("x", "completely different"),
    ]
    chrf = ChrF()
    scores = chrf.score([r for r, _ in pairs], [c for _, c in pairs])
    assert scores.dtype == np.float64 and scores.shape == (4,)
    assert scores.tolist() == [sacrebleu.sentence_chrf(c, [r]).score / 100 for r, c in pairs]
    assert chrf.score(["Same words here."], ["Same words here."]).tolist() == [1.0]
    assert 0.0 < scores[0] < 1.0


def test_chrf_is_not_symmetric_candidate_against_reference():
    ref, cand = "the cat sat on the mat", "the cat"
    assert ChrF().score([ref], [cand])[0] == sacrebleu.sentence_chrf(cand, [ref]).score / 100
    assert ChrF().score([ref], [cand])[0] != ChrF().score([cand], [ref])[0]


def test_chrf_name_fingerprint_and_errors():
    chrf = load_similarity("chrf")
    assert isinstance(chrf, ChrF) and isinstance(chrf, Similarity) and chrf.name == "chrf"
    assert chrf.fingerprint() == "chrf-nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" + sacrebleu.__version__
    assert chrf.score([], []).shape == (0,)
    with pytest.raises(ModelError, match="chrf: 2 references but 1 candidates"):
        chrf.score(["a", "b"], ["a"])


# --- cross-encoder ------------------------------------------------------------------------------------------


def save_tiny_classifier(out: Path, num_labels: int, *, seed: int = 0) -> Path:
    tokenizer = pair_tokenizer(WORDS)
    model = tiny_bert(len(tokenizer), {i: f"LABEL_{i}" for i in range(num_labels)}, seed=seed, initializer_range=0.5)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def regression_dir(tmp_path_factory) -> Path:
    return save_tiny_classifier(tmp_path_factory.mktemp("tiny-regression") / "model", num_labels=1)


@pytest.fixture(scope="module")
def cross(regression_dir) -> CrossEncoderSimilarity:
    return load_similarity("cross_encoder", regression_dir, threads=1)


def own_logit(model: CrossEncoderSimilarity, reference: str, candidate: str) -> float:
    enc = model.tokenizer(reference, candidate, return_tensors="pt")
    with torch.inference_mode():
        return float(model.model(**enc).logits[0, 0])


def test_cross_encoder_scores_are_the_models_own_logits(cross, regression_dir):
    assert isinstance(cross, CrossEncoderSimilarity) and cross.name == f"cross_encoder:{regression_dir}"
    assert cross.fingerprint() == hash_inputs([regression_dir]) and cross.device == "cpu"
    scores = cross.score(REFS, CANDS)
    assert scores.dtype == np.float64 and scores.shape == (len(REFS),)
    np.testing.assert_allclose(scores, [own_logit(cross, r, c) for r, c in zip(REFS, CANDS)], rtol=0, atol=1e-5)
    assert np.ptp(scores[:5]) > 0.1 and np.diff(np.sort(scores[:5])).min() > 1e-3  # far apart, beyond 1e-5


def test_cross_encoder_input_is_the_reference_candidate_pair(cross):
    forward, backward = cross.score(["ka lo mi"], ["tu re"])[0], cross.score(["tu re"], ["ka lo mi"])[0]
    assert forward == pytest.approx(own_logit(cross, "ka lo mi", "tu re"), abs=1e-5)
    assert abs(forward - backward) > 1e-4  # token types tell the sides apart


def test_cross_encoder_does_not_depend_on_batching_or_order(cross):
    whole = cross.score(REFS, CANDS)
    np.testing.assert_allclose(cross.score(REFS, CANDS, max_tokens=1), whole, rtol=0, atol=1e-5)
    order = np.random.default_rng(1).permutation(len(REFS))
    shuffled = cross.score([REFS[i] for i in order], [CANDS[i] for i in order], max_tokens=24)
    np.testing.assert_allclose(shuffled, whole[order], rtol=0, atol=1e-5)


def test_cross_encoder_needs_one_output(tmp_path):
    three = save_tiny_classifier(tmp_path / "three", num_labels=3)
    with pytest.raises(
        ModelError,
        match=rf"{three}: a cross-encoder similarity needs a regression head with one "
        r"output \(num_labels = 1\), but the model has num_labels = 3",
    ):
        load_similarity("cross_encoder", three, threads=1)


def test_cross_encoder_missing_model_says_it_was_looked_up_offline():
    with pytest.raises(
        ModelError,
        match=r"augdag-tests/no-such-bleurt: no cross-encoder regression classifier "
        r".* looked up offline",
    ):
        load_similarity("cross_encoder", "augdag-tests/no-such-bleurt", threads=1)


# --- sentence-transformers embeddings -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedding_dir(tmp_path_factory) -> Path:
    """A tiny sentence-transformers model: a random one-layer BertModel with mean pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel

    base = tmp_path_factory.mktemp("tiny-embedding")
    tokenizer = pair_tokenizer(WORDS)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=0,
        initializer_range=0.5,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertModel(config).save_pretrained(base / "bert")
    tokenizer.save_pretrained(base / "bert")
    modules = [Transformer(str(base / "bert"), max_seq_length=MAX_POSITIONS), Pooling(32, "mean")]
    SentenceTransformer(modules=modules, device="cpu").save(str(base / "st"))
    return base / "st"


@pytest.fixture(scope="module")
def embedding(embedding_dir) -> EmbeddingSimilarity:
    return load_similarity("embedding", embedding_dir, threads=1)


def test_embedding_is_the_cosine_of_the_models_embeddings(embedding, embedding_dir):
    from sentence_transformers import SentenceTransformer

    assert isinstance(embedding, EmbeddingSimilarity) and embedding.name == f"embedding:{embedding_dir}"
    assert embedding.fingerprint() == hash_inputs([embedding_dir]) and embedding.device == "cpu"
    scores = embedding.score(REFS, CANDS)
    assert scores.dtype == np.float64 and scores.shape == (len(REFS),)
    own = SentenceTransformer(str(embedding_dir), device="cpu")
    a = own.encode(REFS, show_progress_bar=False).astype(np.float64)
    b = own.encode(CANDS, show_progress_bar=False).astype(np.float64)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(scores, cosine, rtol=0, atol=1e-6)
    assert scores[3] == pytest.approx(1.0, abs=1e-6) and scores[5] == pytest.approx(1.0, abs=1e-6)
    assert (scores[[0, 1, 2, 4]] < 1 - 1e-4).all()


def test_embedding_does_not_depend_on_batching_or_order(embedding):
    whole = embedding.score(REFS, CANDS)
    np.testing.assert_allclose(embedding.score(REFS, CANDS, max_tokens=1), whole, rtol=0, atol=1e-6)
    order = np.random.default_rng(2).permutation(len(REFS))
    shuffled = embedding.score([REFS[i] for i in order], [CANDS[i] for i in order])
    np.testing.assert_allclose(shuffled, whole[order], rtol=0, atol=1e-6)
    assert embedding.score([], []).shape == (0,)


# --- load_similarity ----------------------------------------------------------------------------------------


def test_load_similarity_errors():
    assert KINDS == ("chrf", "cross_encoder", "embedding")
    with pytest.raises(ModelError, match=r"similarity kind 'bleu': expected one of chrf, cross_encoder, embedding"):
        load_similarity("bleu")
    for kind in ("cross_encoder", "embedding"):
        with pytest.raises(ModelError, match=rf"similarity kind '{kind}' needs a model .* use kind 'chrf'"):
            load_similarity(kind)
    with pytest.raises(
        ModelError,
        match=r"augdag-tests/no-such-embedder: no sentence-transformers model found, "
        r"looked up offline",
    ):
        load_similarity("embedding", "augdag-tests/no-such-embedder", threads=1)

"""models/classifier/ on a made-up three-class task, with tiny models built and saved here.

The task: every class has four keywords of its own; a sentence is two keywords of its class among three
filler words all classes share. In the training set the i-th sentence of every class has the same
fillers in the same places, so only the keywords tell the classes apart; held-out sentences put other
fillers in other places. The sentence-transformers encoder and the Hugging Face model are one-layer
BERTs (hidden 32) with random weights and a WordLevel tokenizer, saved to disk and loaded through the
same code as a user's model.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from conf.errors import ModelError
from conf.offline import go_offline
from models.classifier import CARD, KINDS, build_classifier, classification_scores, hashed_ngrams, load_classifier

go_offline()  # HF_HUB_OFFLINE=1 and friends, unless the environment says otherwise
torch.set_num_threads(1)

LABELS = ["fruit", "transport", "music"]
KEYWORDS = {0: ["apple", "pear", "plum", "grape"], 1: ["train", "bus", "tram", "ferry"], 2: ["violin", "drum", "flute", "piano"]}
FILLER = ["the", "a", "of", "and", "we", "saw", "some", "very", "nice", "today", "with", "it"]
KEYWORD_PAIRS = list(itertools.combinations(range(4), 2))


def training_set() -> list[tuple[str, int]]:
    """30 sentences, 10 per class: the i-th of every class shares its fillers and its keywords' places."""
    r = random.Random(0)
    out = []
    for i in range(10):
        filler, places = r.sample(FILLER, 3), sorted(r.sample(range(5), 2))
        a, b = KEYWORD_PAIRS[i % len(KEYWORD_PAIRS)]
        for label, keys in KEYWORDS.items():
            words = list(filler)
            for place, key in zip(places, (keys[a], keys[b])):
                words.insert(place, key)
            out.append((" ".join(words), label))
    return out


def held_out(n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` sentences of the same task with random fillers, keyword pairs and word orders."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        words = r.sample(FILLER, 3) + r.sample(KEYWORDS[i % 3], 2)
        r.shuffle(words)
        out.append((" ".join(words), i % 3))
    return out


TRAIN, TEST = training_set(), held_out(30, seed=7)
TRAIN_TEXTS, TRAIN_LABELS = [t for t, _ in TRAIN], [y for _, y in TRAIN]
TEST_TEXTS, TEST_LABELS = [t for t, _ in TEST], [y for _, y in TEST]


def batches(steps: int, size: int = 8, seed: int = 0):
    """``steps`` random batches of the training set (the same for the same seed)."""
    r = random.Random(seed)
    for _ in range(steps):
        batch = r.sample(TRAIN, size)
        yield [t for t, _ in batch], [y for _, y in batch]


def train(clf, steps: int, size: int = 8) -> list[float]:
    return [clf.train_step(texts, labels) for texts, labels in batches(steps, size)]


# --------------------------------------------------------------------------------- tiny models on disk
def word_level_tokenizer():
    """BERT's special tokens over the task's words; anything else is [UNK]."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = [w for keys in KEYWORDS.values() for w in keys] + FILLER
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )


def tiny_bert_config(**kwargs):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=4 + 12 + len(FILLER),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        **kwargs,
    )


@pytest.fixture(scope="module")
def sentence_encoder_dir(tmp_path_factory) -> Path:
    """A SentenceTransformer (random one-layer BERT + mean pooling) written by ``SentenceTransformer.save``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertModel

    base = tmp_path_factory.mktemp("tiny-bert")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertModel(tiny_bert_config()).save_pretrained(base)
    word_level_tokenizer().save_pretrained(base)
    transformer = Transformer(str(base), max_seq_length=32)
    encoder = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension())], device="cpu")
    out = tmp_path_factory.mktemp("tiny-sentence-encoder")
    encoder.save(str(out))
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """A random BertForSequenceClassification with a two-label head (the classifier asks for three)."""
    from transformers import BertForSequenceClassification

    out = tmp_path_factory.mktemp("tiny-bert-cls")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertForSequenceClassification(
            tiny_bert_config(num_labels=2, id2label={0: "no", 1: "yes"}, label2id={"no": 0, "yes": 1})
        )
    model.save_pretrained(out)
    word_level_tokenizer().save_pretrained(out)
    return out


def parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# ----------------------------------------------------------------------------------------------- builtin
def test_hashed_ngrams_are_lowercased_unigrams_then_bigrams_with_a_stable_hash():
    import zlib

    assert hashed_ngrams("The  cat\tSAT", buckets=1000) == [
        zlib.crc32(s.encode()) % 1000 for s in ("the", "cat", "sat", "the cat", "cat sat")
    ]
    assert hashed_ngrams("The cat", buckets=2**18) == [93670, 148392, 224200]  # crc32: the same in any process
    assert hashed_ngrams("a b c", buckets=50, ngrams=1) == [zlib.crc32(s.encode()) % 50 for s in "abc"]
    assert hashed_ngrams("", buckets=50) == [] and hashed_ngrams("one", buckets=50, ngrams=3) == [zlib.crc32(b"one") % 50]


def test_builtin_learns_the_task_and_generalises_to_held_out_sentences():
    clf = build_classifier("builtin", LABELS, seed=0, device="cpu", threads=1)
    assert (clf.kind, clf.labels, clf.device, clf.lr, clf.options) == (
        "builtin",
        LABELS,
        "cpu",
        1e-2,
        {"buckets": 2**18, "dim": 64, "dropout": 0.1, "ngrams": 2},
    )
    losses = train(clf, 100)
    assert losses[0] == pytest.approx(np.log(3), abs=0.05)  # a uniform guess to start with
    assert losses[-1] < losses[0] / 4  # measured: 1.08 → 0.0017
    pred = clf.predict(TEST_TEXTS)
    assert pred.dtype == np.int64 and pred.shape == (30,)
    assert classification_scores(TEST_LABELS, pred, 3) == {"accuracy": 1.0, "macro_f1": 1.0}
    assert clf.predict(TEST_TEXTS, batch_size=7).tolist() == pred.tolist()  # batching changes nothing
    assert clf.predict([]).tolist() == [] and clf.predict([""]).shape == (1,)
    assert clf.steps == 100


def test_builtin_is_deterministic_for_a_seed_and_leaves_torch_global_generator_alone():
    state = torch.get_rng_state()
    runs = [
        train(build_classifier("builtin", LABELS, seed=seed, device="cpu", threads=1, buckets=4096), 20) for seed in (3, 3, 4)
    ]
    assert runs[0] == runs[1]  # exact float equality, step after step
    assert runs[0] != runs[2]
    assert torch.equal(torch.get_rng_state(), state)


def test_builtin_save_and_load_give_identical_predictions(tmp_path):
    clf = build_classifier("builtin", LABELS, seed=1, device="cpu", threads=1, buckets=2**12, dim=16, dropout=0.2)
    train(clf, 60)
    clf.save(tmp_path / "clf")
    card = json.loads((tmp_path / "clf" / CARD).read_text())
    assert card == {
        "format": 1,
        "kind": "builtin",
        "labels": LABELS,
        "model": None,
        "steps": 60,
        "hyper": {"lr": 0.01, "seed": 1, "buckets": 4096, "dim": 16, "dropout": 0.2, "ngrams": 2},
    }
    loaded = load_classifier(tmp_path / "clf", device="cpu", threads=1)
    assert (loaded.kind, loaded.labels, loaded.options, loaded.steps) == ("builtin", LABELS, clf.options, 60)
    texts = TEST_TEXTS + TRAIN_TEXTS + ["nothing known here", ""]
    assert loaded.predict(texts).tolist() == clf.predict(texts).tolist()
    for a, b in zip(clf._module.parameters(), loaded._module.parameters()):
        assert torch.equal(a, b)
    # training goes on with the same dropout stream: the same next loss as the original's
    texts, labels = next(batches(1, seed=5))
    assert loaded.train_step(texts, labels) == clf.train_step(texts, labels)


def test_predict_proba_is_the_softmax_of_the_logits_and_agrees_with_predict():
    clf = build_classifier("builtin", LABELS, seed=1, device="cpu", threads=1, buckets=2**12, dim=16)
    train(clf, 30)
    texts = TEST_TEXTS + TRAIN_TEXTS + [""]
    proba = clf.predict_proba(texts, batch_size=7)
    assert proba.shape == (len(texts), 3) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert proba.argmax(axis=1).tolist() == clf.predict(texts).tolist()
    clf._module.eval()
    with torch.inference_mode():  # the same texts one by one, straight through the module: batching changes nothing
        direct = np.stack([torch.softmax(clf._logits([t]).double(), -1)[0].numpy() for t in texts])
    np.testing.assert_allclose(proba, direct, rtol=0, atol=1e-6)  # float32 logits summed in another order


# ------------------------------------------------------------------------------------ sentence_embedding
def test_sentence_embedding_trains_the_head_only_and_memoises_encodings(sentence_encoder_dir, tmp_path):
    clf = build_classifier("sentence_embedding", LABELS, model=str(sentence_encoder_dir), seed=0, device="cpu", threads=1)
    assert (clf.kind, clf.lr, clf.options) == ("sentence_embedding", 1e-2, {"hidden": 0, "dropout": 0.1, "encode_batch_size": 64})
    encoder_before = parameters(clf.encoder)
    losses = train(clf, 300, size=10)
    # measured: 1.02 → 0.34 (a random encoder gives close embeddings, the head learns slowly)
    assert np.mean(losses[-20:]) < np.mean(losses[:20]) / 2
    assert len(clf.memo) == len(set(TRAIN_TEXTS))  # each distinct text encoded once, whatever the steps
    pred = clf.predict(TRAIN_TEXTS)
    assert classification_scores(TRAIN_LABELS, pred, 3)["accuracy"] == 1.0
    encoder_after = parameters(clf.encoder)
    assert encoder_before.keys() == encoder_after.keys()
    assert all(torch.equal(encoder_before[k], encoder_after[k]) for k in encoder_before)  # frozen

    clf.save(tmp_path / "clf")
    card = json.loads((tmp_path / "clf" / CARD).read_text())
    assert (card["kind"], card["model"], card["hyper"]["hidden"]) == (
        "sentence_embedding",
        str(sentence_encoder_dir.resolve()),
        0,
    )
    assert sorted(p.name for p in (tmp_path / "clf").iterdir()) == [CARD, "model.safetensors"]  # no encoder copy
    loaded = load_classifier(tmp_path / "clf", device="cpu", threads=1)
    assert loaded.predict(TEST_TEXTS + TRAIN_TEXTS).tolist() == clf.predict(TEST_TEXTS + TRAIN_TEXTS).tolist()


def test_sentence_embedding_with_a_hidden_layer_is_deterministic(sentence_encoder_dir):
    runs = [
        train(
            build_classifier(
                "sentence_embedding", LABELS, model=str(sentence_encoder_dir), seed=2, device="cpu", threads=1, hidden=16
            ),
            10,
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


# -------------------------------------------------------------------------------------------------- hf
def test_hf_fine_tunes_a_new_head_and_saves_a_loadable_directory(hf_dir, tmp_path):
    clf = build_classifier("hf", LABELS, model=str(hf_dir), lr=3e-3, seed=0, device="cpu", threads=1, max_length=16)
    assert clf.net.config.id2label == {0: "fruit", 1: "transport", 2: "music"}  # 3 labels replace the saved 2
    assert clf.net.classifier.out_features == 3
    losses = [clf.train_step(TRAIN_TEXTS, TRAIN_LABELS) for _ in range(20)]  # the whole set each step
    assert losses[-1] < losses[0] * 0.8  # measured: 1.10 → 0.69

    clf.save(tmp_path / "clf")
    card = json.loads((tmp_path / "clf" / CARD).read_text())
    assert card["hyper"] == {"lr": 0.003, "seed": 0, "max_length": 16} and card["model"] == str(hf_dir)
    config = json.loads((tmp_path / "clf" / "config.json").read_text())
    assert config["id2label"] == {"0": "fruit", "1": "transport", "2": "music"}
    loaded = load_classifier(tmp_path / "clf", device="cpu", threads=1)
    assert loaded.net.config.id2label == {0: "fruit", 1: "transport", 2: "music"}
    texts = TEST_TEXTS + TRAIN_TEXTS
    assert loaded.predict(texts).tolist() == clf.predict(texts).tolist()
    assert loaded.predict(texts, batch_size=5).tolist() == clf.predict(texts).tolist()


def test_hf_is_deterministic_for_a_seed(hf_dir):
    runs = [train(build_classifier("hf", LABELS, model=str(hf_dir), seed=seed, device="cpu", threads=1), 3) for seed in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


# ------------------------------------------------------------------------------------------------ scores
def test_classification_scores_on_a_hand_computed_confusion():
    gold, pred = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 2]
    # class 0: TP 1, FP 1 (the 2 read as 0), FN 1 → P 1/2, R 1/2, F1 1/2
    # class 1: TP 2, FP 1 (the 0 read as 1), FN 0 → P 2/3, R 1,   F1 2·(2/3)/(5/3) = 4/5
    # class 2: TP 1, FP 0,                  FN 1 → P 1,   R 1/2, F1 2·(1/2)/(3/2) = 2/3
    # macro-F1 = (1/2 + 4/5 + 2/3) / 3 = (15 + 24 + 20) / 90 = 59/90
    # (sklearn's mean of per-class F1s vs one fraction: equal up to the last bits, hence rel=1e-12)
    assert classification_scores(gold, pred, 3) == pytest.approx({"accuracy": 4 / 6, "macro_f1": 59 / 90}, rel=1e-12)
    # a fourth class, neither present nor predicted, counts as F1 0: (59/30) / 4 = 59/120
    assert classification_scores(gold, pred, 4) == pytest.approx({"accuracy": 4 / 6, "macro_f1": 59 / 120}, rel=1e-12)
    # every step exact in binary (F1 2/2 and 0, mean 1/2): exact
    assert classification_scores(np.array([1, 1]), np.array([1, 1]), 2) == {"accuracy": 1.0, "macro_f1": 0.5}
    with pytest.raises(ModelError, match=r"label indices \[3\] outside \[0, 3\)"):
        classification_scores([0, 3], [0, 1], 3)
    with pytest.raises(ModelError, match="2 gold labels but 1 predictions"):
        classification_scores([0, 1], [0], 3)


# ------------------------------------------------------------------------------------------------ errors
def test_unknown_kind_lists_the_kinds():
    with pytest.raises(
        ModelError,
        match=r"classifier kind 'fasttext' unknown; kinds: builtin \(no model.*"
        r"sentence_embedding \(needs model.*hf \(needs model",
    ):
        build_classifier("fasttext", LABELS)


@pytest.mark.parametrize("kind", ["sentence_embedding", "hf"])
def test_a_kind_that_needs_a_model_says_so(kind):
    with pytest.raises(ModelError, match=f"classifier {kind} needs a model .* none given. Kinds: builtin"):
        build_classifier(kind, LABELS)


def test_bad_options_labels_and_batches_are_refused():
    with pytest.raises(ModelError, match=r"builtin: unknown option\(s\) 'hidden'; options of builtin: buckets="):
        build_classifier("builtin", LABELS, hidden=3)
    with pytest.raises(ModelError, match=r"option dropout=1.5; expected in \[0.0, 1.0\)"):
        build_classifier("builtin", LABELS, dropout=1.5)
    with pytest.raises(ModelError, match="builtin takes no model"):
        build_classifier("builtin", LABELS, model="x")
    with pytest.raises(ModelError, match="two or more distinct"):
        build_classifier("builtin", ["a", "a"])
    clf = build_classifier("builtin", LABELS, device="cpu", threads=1, buckets=64)
    with pytest.raises(ModelError, match=r"labels must be integer indices in \[0, 3\).* found \[0, 3\]"):
        clf.train_step(["a", "b"], [0, 3])
    with pytest.raises(ModelError, match="2 texts but 1 labels"):
        clf.train_step(["a", "b"], [0])


def test_missing_models_and_directories_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match=r"augdag-tests/no-such-model: no Hugging Face sequence-classification"):
        build_classifier("hf", LABELS, model="augdag-tests/no-such-model", device="cpu", threads=1)
    with pytest.raises(ModelError, match=r"no-such-encoder: no sentence-transformers model found"):
        build_classifier("sentence_embedding", LABELS, model=str(tmp_path / "no-such-encoder"), device="cpu", threads=1)
    with pytest.raises(ModelError, match=f"{tmp_path}: no {CARD}; expected a directory written by "):
        load_classifier(tmp_path)


def test_kinds_have_their_own_default_learning_rates():
    assert {k: s.lr for k, s in KINDS.items()} == {"builtin": 1e-2, "sentence_embedding": 1e-2, "hf": 5e-5}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", ["builtin", "sentence_embedding", "hf"])
def test_every_kind_trains_saves_and_loads_on_cuda(kind, sentence_encoder_dir, hf_dir, tmp_path):
    model = {"builtin": None, "sentence_embedding": str(sentence_encoder_dir), "hf": str(hf_dir)}[kind]
    clf = build_classifier(kind, LABELS, model=model, lr=3e-3 if kind == "hf" else None, device="auto")
    assert clf.device == "cuda"
    losses = [clf.train_step(TRAIN_TEXTS, TRAIN_LABELS) for _ in range(30)]
    assert losses[-1] < losses[0]
    clf.save(tmp_path / "clf")
    loaded = load_classifier(tmp_path / "clf", device="cuda")
    assert loaded.predict(TEST_TEXTS + TRAIN_TEXTS).tolist() == clf.predict(TEST_TEXTS + TRAIN_TEXTS).tolist()

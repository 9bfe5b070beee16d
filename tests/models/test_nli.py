"""models/nli.py on a tiny BERT NLI classifier trained here to memorise a table of made-up sentence pairs.

``train_tiny_nli`` (≈ 3 s on one thread) overfits a one-layer BERT to a (premise, hypothesis) → label
table chosen by the caller, with the labels in a non-standard order (entailment is class 1), and saves
it with ``save_pretrained``, so it loads through the same code as a user's model. The PCC pipeline tests
import ``train_tiny_nli`` / ``TABLE`` from here to test the Eq. 3 filter; importing this module builds
nothing.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from conf.errors import ModelError
from conf.offline import go_offline
from models.nli import MutualImplication, NLIModel, find_entailment, softmax
from models.pair_classifier import model_fingerprint
from storage.artifacts import hash_inputs

go_offline()  # HF_HUB_OFFLINE=1 and friends, unless the environment says otherwise

NON_STANDARD = {0: "NEUTRAL", 1: "ENTAILMENT", 2: "CONTRADICTION"}  # MNLI checkpoints differ; never guess
E, N, C = "ENTAILMENT", "NEUTRAL", "CONTRADICTION"

# (premise, hypothesis, label) over a made-up vocabulary; both directions of every pair are listed
TABLE: list[tuple[str, str, str]] = [
    ("ka lo mi", "lo ka mi", E),
    ("lo ka mi", "ka lo mi", E),  # mutual: MI
    ("sa vo ni", "vo sa ni", E),
    ("vo sa ni", "sa vo ni", E),  # mutual: MI
    ("tu re sa vo", "tu re", E),
    ("tu re", "tu re sa vo", N),  # forward only
    ("pe du", "pe du go ba", N),
    ("pe du go ba", "pe du", E),  # backward only
    ("ni pe", "du go ba", C),
    ("du go ba", "ni pe", C),
    ("fi ze ru", "fi ze ko", N),
    ("fi ze ko", "fi ze ru", N),
    ("ko ru", "ba go", C),
    ("ba go", "ko ru", N),
]
MAX_POSITIONS = 64


def pair_tokenizer(words: Sequence[str], *, max_length: int = MAX_POSITIONS):
    """BERT's conventions on a word vocabulary: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, then ``words``;
    ``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]`` with token types 0/1, as BertTokenizer does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    # transformers 5 returns token_type_ids only when they are a model input name
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        model_max_length=max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def tiny_bert(vocab_size: int, id2label: Mapping[int, str], *, seed: int = 0, initializer_range: float = 0.02):
    """A randomly initialised one-layer BertForSequenceClassification (hidden 32, 2 heads), no dropout.
    A large ``initializer_range`` (e.g. 0.5) gives an untrained model logits far apart between inputs."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS,
        num_labels=len(id2label),
        id2label=dict(id2label),
        label2id={v: k for k, v in id2label.items()},
        pad_token_id=0,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=initializer_range,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BertForSequenceClassification(config)


def table_words(table: Sequence[tuple[str, str, str]]) -> list[str]:
    return sorted({w for p, h, _ in table for w in f"{p} {h}".split()})


def train_tiny_nli(
    out: Path,
    table: Sequence[tuple[str, str, str]] = TABLE,
    *,
    id2label: Mapping[int, str] = NON_STANDARD,
    words: Sequence[str] = (),
    seed: int = 0,
    max_steps: int = 3000,
    lr: float = 3e-3,
) -> Path:
    """A tiny BERT NLI classifier that reproduces ``table`` exactly, saved to ``out`` (model and tokenizer).

    ``table`` rows are (premise, hypothesis, label), the label one of ``id2label``'s names; the vocabulary
    is the table's words plus ``words`` (others become [UNK]). Full-batch Adam on one thread until every
    row is classified right with a mean loss under 0.02 (a margin, so padding cannot flip an argmax);
    a RuntimeError if ``max_steps`` are not enough.
    """
    label2id = {v: k for k, v in id2label.items()}
    unknown = sorted({label for *_, label in table} - set(label2id))
    if unknown:
        raise ValueError(f"table labels {unknown} are not in id2label {dict(id2label)}")
    tokenizer = pair_tokenizer([*table_words(table), *words])
    model = tiny_bert(len(tokenizer), id2label, seed=seed)
    enc = tokenizer([p for p, _, _ in table], [h for _, h, _ in table], padding=True, return_tensors="pt")
    labels = torch.tensor([label2id[label] for *_, label in table])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains faster on one thread, and the same on every machine
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)
            model.train()
            for _ in range(max_steps):
                out_ = model(**enc, labels=labels)
                if bool((out_.logits.argmax(-1) == labels).all()) and out_.loss.item() < 0.02:
                    break
                optimizer.zero_grad()
                out_.loss.backward()
                optimizer.step()
            else:
                raise RuntimeError(
                    f"train_tiny_nli: the table is not memorised after {max_steps} steps "
                    f"(loss {out_.loss.item():.3f}); raise max_steps or change the seed"
                )
    finally:
        torch.set_num_threads(threads)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def relabel(src: Path, dst: Path, id2label: Mapping[int, str]) -> Path:
    """A copy of a saved classifier whose config names the same classes differently."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["id2label"] = {str(k): v for k, v in id2label.items()}
    config["label2id"] = {v: k for k, v in id2label.items()}
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.fixture(scope="session")
def tiny_nli_dir(tmp_path_factory) -> Path:
    """The tiny NLI model of this session, trained on ``TABLE`` on the first use."""
    return train_tiny_nli(tmp_path_factory.mktemp("tiny-nli") / "model")


@pytest.fixture(scope="module")
def nli(tiny_nli_dir) -> NLIModel:
    return NLIModel.load(tiny_nli_dir, threads=1)


def reference_probs(nli: NLIModel, premise: str, hypothesis: str) -> np.ndarray:
    """The softmax of the model's own forward pass on one pair, tokenised by its own tokenizer."""
    enc = nli.tokenizer(premise, hypothesis, return_tensors="pt")
    with torch.inference_mode():
        return torch.softmax(nli.model(**enc).logits[0].double(), -1).numpy()


def test_load_reads_the_entailment_class_from_id2label(nli, tiny_nli_dir):
    assert (nli.labels, nli.entailment_index, nli.entailment_label, nli.device) == (
        ["NEUTRAL", "ENTAILMENT", "CONTRADICTION"],
        1,
        "ENTAILMENT",
        "cpu",
    )
    assert nli.fingerprint() == hash_inputs([tiny_nli_dir])
    assert nli.describe() == (
        f"nli:{tiny_nli_dir} on cpu (entailment = 'ENTAILMENT', class 1 of ['NEUTRAL', 'ENTAILMENT', 'CONTRADICTION'])"
    )


def test_the_tiny_model_reproduces_its_table(nli):
    enc = nli.tokenizer([p for p, _, _ in TABLE], [h for _, h, _ in TABLE], padding=True, return_tensors="pt")
    with torch.inference_mode():
        predicted = [nli.labels[i] for i in nli.model(**enc).logits.argmax(-1).tolist()]
    assert list(zip([(p, h) for p, h, _ in TABLE], predicted)) == [((p, h), label) for p, h, label in TABLE]


def test_entailment_is_the_argmax_and_its_softmax(nli):
    premises, hypotheses = [p for p, _, _ in TABLE], [h for _, h, _ in TABLE]
    entails, p = nli.entailment(premises, hypotheses)
    assert (entails.dtype, p.dtype, entails.shape, p.shape) == (np.bool_, np.float64, (14,), (14,))
    assert entails.tolist() == [label == E for *_, label in TABLE]
    expected = np.array([reference_probs(nli, a, b)[1] for a, b in zip(premises, hypotheses)])
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-5)
    assert (p[entails] > 0.5).all() and (p[~entails] < 0.5).all()  # memorised with a margin


X = ["ka lo mi", "sa vo ni", "tu re sa vo", "pe du", "ni pe", "fi ze ru", "ko ru"]
XBAR = ["lo ka mi", "vo sa ni", "tu re", "pe du go ba", "du go ba", "fi ze ko", "ba go"]
LABEL = {(p, h): label for p, h, label in TABLE}


def test_mutual_implication_needs_entailment_both_ways(nli):
    result = nli.mutual_implication(X, XBAR)
    assert isinstance(result, MutualImplication)
    assert result.forward.tolist() == [True, True, True, False, False, False, False]
    assert result.backward.tolist() == [True, True, False, True, False, False, False]
    assert result.mi.tolist() == [True, True, False, False, False, False, False]
    assert result.mi.tolist() == [LABEL[x, xb] == E and LABEL[xb, x] == E for x, xb in zip(X, XBAR)]
    assert result.mi.dtype == np.bool_
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.mi = np.zeros(7, bool)


def test_mutual_implication_probabilities_are_the_models_own(nli):
    result = nli.mutual_implication(X, XBAR)
    assert (result.p_forward.dtype, result.p_backward.dtype) == (np.float64, np.float64)
    np.testing.assert_allclose(result.p_forward, [reference_probs(nli, x, xb)[1] for x, xb in zip(X, XBAR)], rtol=0, atol=1e-5)
    np.testing.assert_allclose(result.p_backward, [reference_probs(nli, xb, x)[1] for x, xb in zip(X, XBAR)], rtol=0, atol=1e-5)


def test_results_do_not_depend_on_batching_or_order(nli):
    whole = nli.mutual_implication(X, XBAR, max_tokens=4096)
    single = nli.mutual_implication(X, XBAR, max_tokens=1)  # every pair a batch of its own
    order = np.random.default_rng(0).permutation(len(X))
    shuffled = nli.mutual_implication([X[i] for i in order], [XBAR[i] for i in order], max_tokens=20)
    for other, idx in ((single, np.arange(len(X))), (shuffled, order)):
        assert other.mi.tolist() == whole.mi[idx].tolist()
        np.testing.assert_allclose(other.p_forward, whole.p_forward[idx], rtol=0, atol=1e-6)
        np.testing.assert_allclose(other.p_backward, whole.p_backward[idx], rtol=0, atol=1e-6)


def test_empty_and_mismatched_inputs(nli):
    result = nli.mutual_implication([], [])
    assert (result.mi.shape, result.p_forward.shape, result.p_forward.dtype) == ((0,), (0,), np.float64)
    with pytest.raises(ModelError, match="2 sentences but 1 paraphrases"):
        nli.mutual_implication(["ka", "lo"], ["mi"])


def test_long_pairs_are_truncated_to_the_models_length(nli):
    long = " ".join(["ka lo mi"] * 40)  # 120 words, more than the 64 positions
    entails, p = nli.entailment([long, "ka lo mi"], [long, "lo ka mi"])
    assert entails[1] and np.isfinite(p).all()


def test_labels_without_entailment_need_entailment_label(tiny_nli_dir, tmp_path):
    generic = relabel(tiny_nli_dir, tmp_path / "generic", {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ModelError) as e:
        NLIModel.load(generic, threads=1)
    assert str(generic) in str(e.value) and "['LABEL_0', 'LABEL_1', 'LABEL_2']" in str(e.value)
    assert "entailment_label" in str(e.value)
    explicit = NLIModel.load(generic, threads=1, entailment_label="LABEL_1")
    assert (explicit.entailment_index, explicit.entailment_label) == (1, "LABEL_1")
    assert explicit.mutual_implication(X, XBAR).mi.tolist() == [True, True, False, False, False, False, False]
    # the explicit label selects another class: P of class 0 (NEUTRAL in the trained table)
    other = NLIModel.load(generic, threads=1, entailment_label="LABEL_0")
    _, p = other.entailment(["tu re"], ["tu re sa vo"])
    np.testing.assert_allclose(p, [reference_probs(other, "tu re", "tu re sa vo")[0]], rtol=0, atol=1e-5)
    with pytest.raises(ModelError, match=r"entailment_label='entailment' given, but the model's labels .*LABEL_0"):
        NLIModel.load(generic, threads=1, entailment_label="entailment")


def test_find_entailment_matches_one_label_case_insensitively():
    assert find_entailment(["contradiction", "neutral", "entailment"], "m") == 2
    assert find_entailment(["Entails", "Other"], "m") == 0
    assert find_entailment(["entailment", "not_entailment"], "m") == 0  # RTE-style: the exact one wins
    with pytest.raises(
        ModelError,
        match=r"m: 2 labels name the entailment class .*"
        r"\['entailment_a', 'entailment_b'\].*entailment_label",
    ):
        find_entailment(["entailment_a", "entailment_b"], "m")
    with pytest.raises(
        ModelError,
        match=r"m: no label names the entailment class .*\['yes', 'no'\].*"
        r"Hint: set entailment_label",
    ):
        find_entailment(["yes", "no"], "m")


def test_softmax_is_stable_and_sums_to_one():
    p = softmax(np.array([[1000.0, 1000.0, -1000.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(p, [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]], rtol=0, atol=1e-15)


def test_fingerprint_of_a_name_is_the_name(tiny_nli_dir):
    assert model_fingerprint("org/some-nli-model") == "org/some-nli-model"
    assert model_fingerprint(tiny_nli_dir) == hash_inputs([tiny_nli_dir])


def test_load_missing_model_says_it_was_looked_up_offline():
    with pytest.raises(ModelError, match=r"augdag-tests/no-such-nli: no NLI classifier .* looked up offline"):
        NLIModel.load("augdag-tests/no-such-nli", threads=1)

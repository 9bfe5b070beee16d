"""Streamed fairseq training (issue 18, "real size"): ``train_fairseq_batches`` and the training stage's
part-by-part feed train exactly what ``train_fairseq`` trains on two whole lists.

The slow test trains one tiny transformer (1+1 layers, 16 dims, 3 updates, one CPU thread) twice on the
same pairs, once from two lists and once from uneven batches, and compares the SentencePiece model, the
dictionaries, the ``train.*`` piece files fairseq-preprocess read (caught on their way to fairseq) and the
trained weights, tensor by tensor. The checkpoint files' bytes are not compared: fairseq pickles into them
the wall-clock training time, its timing meters and its config, which names the run's own temporary work
directory, so two trainings on the same lists differ there too (checked: every weight tensor is equal).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import models.nmt.fairseq as fairseq_module
import models.nmt.fairseq_train as fairseq_train
from conf.errors import InputError, ModelError
from conf.schema import NMTConf, NMTTrainConf
from models.nmt import CARD
from models.nmt.fairseq_train import train_fairseq, train_fairseq_batches
from models.nmt.subwords import train_sentencepiece
from storage.parts import Parts
from tasks.common.nmt import fairseq_builder

pytestmark = pytest.mark.filterwarnings(
    "ignore:Support for mismatched key_padding_mask:UserWarning",
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning",
    "ignore:invalid escape sequence:DeprecationWarning",
)

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "bird",
    "sees",
    "likes",
    "finds",
    "red",
    "small",
    "old",
    "happy",
    "today",
    "and",
    "near",
    "river",
]
TINY = NMTTrainConf(
    encoder_layers=1,
    decoder_layers=1,
    embed_dim=16,
    ffn_dim=32,
    heads=2,
    dropout=0.0,
    warmup_updates=0,
    max_update=3,
    max_tokens=256,
    seed=3,
    vocab_size=60,
)


def messy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Pairs with stray whitespace, and every 7th with a blank side (training leaves those out)."""
    r = random.Random(seed)
    pairs = []
    for i in range(n):
        words = [r.choice(WORDS) for _ in range(r.randint(2, 7))]
        src, tgt = "  ".join(words) + " \n", "\t" + " ".join(w[::-1] for w in words)
        pairs.append((src, " \t") if i % 14 == 0 else ("", tgt) if i % 7 == 0 else (src, tgt))
    return pairs


PAIRS = messy_pairs(120, seed=5)
KEPT = sum(1 for s, t in PAIRS if s.strip() and t.strip())


def uneven_batches(pairs: list[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    """The pairs cut at uneven places: an empty batch, a batch of one, one whose pairs are all left out, ..."""
    cuts = [0, 0, 1, 1, 8, 9, 30, 31, 77, len(pairs)]
    blank = [("x y", ""), ("", "")]
    batches = [([s for s, _ in pairs[a:b]], [t for _, t in pairs[a:b]]) for a, b in zip(cuts, cuts[1:])]
    return batches[:4] + [([s for s, _ in blank], [t for _, t in blank])] + batches[4:]


@pytest.fixture
def caught_pieces(monkeypatch, tmp_path):
    """Copies of train.src and train.tgt as fairseq-preprocess gets them, one directory per training."""
    caught: list[Path] = []
    real = fairseq_train.run_fairseq

    def run(steps, **kwargs):
        prefix = Path(steps[0][steps[0].index("--trainpref") + 1])
        caught.append(tmp_path / f"pieces-{len(caught)}")
        caught[-1].mkdir()
        for lang in ("src", "tgt"):
            shutil.copyfile(prefix.with_name(f"train.{lang}"), caught[-1] / f"train.{lang}")
        return real(steps, **kwargs)

    monkeypatch.setattr(fairseq_train, "run_fairseq", run)
    return caught


@pytest.mark.slow
def test_batches_train_byte_for_byte_what_two_lists_train(tmp_path, caught_pieces):
    import torch

    from models.nmt import load_model

    listed, batched = tmp_path / "listed", tmp_path / "batched"
    train_fairseq([s for s, _ in PAIRS], [t for _, t in PAIRS], listed, TINY, log=lambda line: None, threads=1, device="cpu")
    train_fairseq_batches(lambda: iter(uneven_batches(PAIRS)), batched, TINY, log=lambda line: None, threads=1, device="cpu")
    for name in ("spm.model", "dict.src.txt", "dict.tgt.txt"):
        assert (listed / name).read_bytes() == (batched / name).read_bytes(), name
    for lang in ("src", "tgt"):
        pieces = (caught_pieces[0] / f"train.{lang}").read_bytes()
        assert pieces == (caught_pieces[1] / f"train.{lang}").read_bytes()
        assert len(pieces.splitlines()) == KEPT
    cards = [json.loads((d / CARD).read_text()) for d in (listed, batched)]
    assert cards[0]["meta"]["pairs"] == cards[1]["meta"]["pairs"] == KEPT
    weights = [load_model(d, device="cpu", threads=1).model.state_dict() for d in (listed, batched)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not [p for p in tmp_path.iterdir() if ".fairseq-work-" in p.name]  # both work directories removed


def test_no_pair_in_any_batch_is_an_error_before_anything_is_written(tmp_path):
    out = tmp_path / "m"
    with pytest.raises(ModelError, match=r"no pair with both sides non-empty to train on \(5 given\)"):
        train_fairseq_batches(lambda: iter([([], []), (["a", " "], ["", "b"]), (["x", "", "z"], [" ", "", "\n"])]), out, TINY)
    assert not out.exists()


def test_a_batch_with_more_sources_than_targets_is_an_error(tmp_path):
    with pytest.raises(ModelError, match="2 sources but 1 targets"):
        train_fairseq_batches(lambda: iter([(["a b"], ["c d"]), (["a", "b"], ["c"])]), tmp_path / "m", TINY)


def test_sentencepiece_from_a_generator_is_the_model_from_a_list(tmp_path):
    sentences = [s for p in PAIRS for s in p]
    listed = train_sentencepiece(sentences, tmp_path / "a.model", vocab_size=60).read_bytes()
    streamed = train_sentencepiece((s for s in sentences), tmp_path / "b.model", vocab_size=60).read_bytes()
    assert listed == streamed


def test_sentencepiece_passes_on_what_its_sentences_raise(tmp_path):
    def sentences():
        yield from ["a b c", "d e f"] * 50
        raise InputError("a part could not be read")

    with pytest.raises(InputError, match="a part could not be read"):
        train_sentencepiece(sentences(), tmp_path / "a.model", vocab_size=20)
    with pytest.raises(ModelError, match="no text to train the subword model on"):
        train_sentencepiece(iter([" ", ""]), tmp_path / "b.model")


def test_fairseq_builder_feeds_training_one_part_at_a_time(tmp_path, monkeypatch):
    tables = [
        pa.table({"src": [s for s, _ in PAIRS[a:b]], "tgt": [t for _, t in PAIRS[a:b]], "n": range(b - a)})
        for a, b in ((0, 50), (50, 51), (51, 120))
    ]
    seen = {}

    def train(batches, path, conf, **kwargs):
        seen.update(first=list(batches()), second=list(batches()), path=path, conf=conf)

    monkeypatch.setattr(fairseq_module, "train_fairseq_batches", train)
    conf = NMTConf(train=TINY)
    fairseq_builder(Parts.of_tables(tables, tmp_path / "parts"), conf)(tmp_path / "model")
    expected = [(t["src"].to_pylist(), t["tgt"].to_pylist()) for t in tables]
    assert seen["first"] == seen["second"] == expected
    assert seen["path"] == tmp_path / "model" and seen["conf"] == TINY
    with pytest.raises(InputError, match="no parts"):
        fairseq_builder(Parts(()), conf)(tmp_path / "model")

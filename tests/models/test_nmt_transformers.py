"""models/nmt/transformers.py on a tiny Marian model trained here on a made-up word-substitution language.

``tiny_marian_dir`` builds the model once per session (≈ 6 s on one thread) and saves it with
``save_pretrained``, so it loads through the same code as a user's model; tests/models/test_nmt_ctranslate2.py
converts the same directory.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch

from conf.errors import ModelError
from conf.offline import go_offline
from models.nmt import DecodeOptions, load_model
from models.nmt.transformers import TransformersModel, max_new_tokens, target_prefix
from storage.artifacts import hash_inputs

go_offline()  # HF_HUB_OFFLINE=1 and friends, unless the environment says otherwise

# the made-up language: every source word has one target word, in the same place
SRC_WORDS = ["ka", "lo", "mi", "tu", "re", "sa", "vo", "ni", "pe", "du", "go", "ba", "fi", "ze", "ru", "ko"]
TGT_WORDS = ["AL", "BE", "CI", "DO", "EF", "GU", "HA", "IK", "JO", "KU", "LI", "MA", "NO", "OP", "PU", "RA"]
LEXICON = dict(zip(SRC_WORDS, TGT_WORDS))
MAX_POSITIONS = 64


def made_up_pairs(n: int, seed: int, *, shortest: int = 3, longest: int = 8) -> list[tuple[str, str]]:
    """``n`` (source, target) sentences of the made-up language, ``shortest``..``longest`` words each."""
    r = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [r.choice(SRC_WORDS) for _ in range(r.randint(shortest, longest))]
        pairs.append((" ".join(words), " ".join(LEXICON[w] for w in words)))
    return pairs


def word_level_tokenizer():
    """Marian's conventions on a word vocabulary: ``</s>`` = 0, ``<unk>`` = 1, ``<pad>`` last, ``</s>``
    appended to every sequence (source and target alike)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"</s>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(SRC_WORDS + TGT_WORDS)}}
    vocab["<pad>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


def train_tiny_marian(out: Path, *, steps: int = 300, seed: int = 0) -> Path:
    """A one-layer Marian (d_model 64) trained ``steps`` Adam steps on 2,000 made-up pairs, saved to ``out``.

    The decoder starts from ``<pad>``, whose embedding stays zero (as CTranslate2's Marian assumes); its
    output bias is -1e4, so it is never predicted and gets no gradient.
    """
    from transformers import MarianConfig, MarianMTModel

    tokenizer = word_level_tokenizer()
    pad, size = tokenizer.pad_token_id, len(tokenizer)
    config = MarianConfig(
        vocab_size=size,
        decoder_vocab_size=size,
        d_model=64,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains faster on one thread, and the same on every machine
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = MarianMTModel(config)
            model.final_logits_bias[0, pad] = -1e4
            _train(model, tokenizer, made_up_pairs(2000, seed=1), steps=steps, seed=seed)
    finally:
        torch.set_num_threads(threads)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _train(model, tokenizer, pairs: list[tuple[str, str]], *, steps: int, seed: int) -> None:
    r = random.Random(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        batch = r.sample(pairs, 32)
        enc = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], padding=True, return_tensors="pt")
        enc["labels"][enc["labels"] == tokenizer.pad_token_id] = -100
        loss = model(**enc).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def tiny_marian_dir(tmp_path_factory) -> Path:
    """The tiny Marian of this session, trained on the first call."""
    out = tmp_path_factory.getbasetemp() / "tiny-marian"
    if not (out / "config.json").is_file():
        train_tiny_marian(out)
    return out


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return tiny_marian_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def marian(marian_dir) -> TransformersModel:
    return load_model(marian_dir, threads=1)


HELD_OUT = made_up_pairs(60, seed=7)  # unseen combinations of the same words


def test_max_new_tokens_is_a_len_plus_b_capped_by_positions():
    options = DecodeOptions(max_len_a=1.5, max_len_b=10)
    assert [max_new_tokens(n, options, 64) for n in (1, 6, 40)] == [11, 19, 64]
    assert max_new_tokens(100, options, None) == 160


def test_marian_tokenizer_has_no_target_prefix_and_appends_eos():
    tokenizer = word_level_tokenizer()
    assert target_prefix(tokenizer) == []
    assert tokenizer(text_target=["AL BE zz"])["input_ids"] == [[18, 19, 1, 0]]  # AL BE <unk> </s>


def test_load_missing_model_says_it_was_looked_up_offline():
    with pytest.raises(
        ModelError,
        match=r"augdag-tests/no-such-model: no seq2seq transformers model found, "
        r"looked up offline",
    ):
        load_model("augdag-tests/no-such-model")


@pytest.mark.slow
def test_load_model_picks_transformers_for_a_saved_model(marian, marian_dir):
    assert (type(marian), marian.backend, marian.device) == (TransformersModel, "transformers", "cpu")
    assert (marian.max_positions, marian.prefix, marian.pad_id) == (MAX_POSITIONS, [], 34)
    assert marian.fingerprint() == hash_inputs([marian_dir])


@pytest.mark.slow
def test_score_has_one_logprob_per_label_token_eos_included(marian):
    scores = marian.score(["ka lo mi", "tu re sa vo ni"], ["AL BE CI", "DO EF GU HA IK"])
    assert [s.dtype for s in scores] == [np.float32, np.float32]
    assert [len(s) for s in scores] == [4, 6]  # words + </s>
    assert all(-0.5 < x < 0 for s in scores for x in s)  # the trained mapping is near-certain


@pytest.mark.slow
def test_score_equals_teacher_forced_logprobs_of_the_model(marian):
    src, tgt = "re fi lo mi tu", "EF NO BE CI DO"
    enc = marian.tokenizer([src], text_target=[tgt], return_tensors="pt")
    with torch.inference_mode():
        out = marian.model(**enc)
    direct = torch.log_softmax(out.logits[0], -1).gather(-1, enc["labels"][0, :, None])[:, 0].numpy()
    (ours,) = marian.score([src], [tgt])
    np.testing.assert_allclose(ours, direct, atol=1e-5, rtol=0)
    assert -float(ours.mean()) == pytest.approx(out.loss.item(), abs=1e-5)  # the mean cross-entropy


@pytest.mark.slow
def test_score_is_the_same_whatever_batching_and_input_order(marian):
    src, tgt = [s for s, _ in HELD_OUT], [t for _, t in HELD_OUT]
    one_batch = marian.score(src, tgt, max_tokens=100_000)
    order = np.random.default_rng(0).permutation(len(src))
    shuffled_small = marian.score([src[i] for i in order], [tgt[i] for i in order], max_tokens=20)
    for j, i in enumerate(order):
        np.testing.assert_allclose(shuffled_small[j], one_batch[i], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_score_gives_none_for_unscorable_pairs_and_scores_the_rest(marian):
    too_long = " ".join(["ka"] * MAX_POSITIONS)  # 64 words + </s> = 65 positions > 64
    longest = " ".join(["ka"] * (MAX_POSITIONS - 1))  # exactly 64 positions
    src = ["ka lo", "ka lo", "", too_long, "ka lo mi", longest]
    tgt = ["AL BE", "", "AL", "AL", "AL BE CI", "AL"]
    scores = marian.score(src, tgt)
    assert [None if s is None else len(s) for s in scores] == [3, None, None, None, 4, 2]
    np.testing.assert_allclose(scores[0], marian.score(["ka lo"], ["AL BE"])[0], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_translate_reproduces_the_made_up_mapping(marian):
    hypotheses = marian.translate([s for s, _ in HELD_OUT])
    references = [t for _, t in HELD_OUT]
    exact = sum(h == r for h, r in zip(hypotheses, references))
    assert exact >= 54  # measured: 59 of 60
    assert sacrebleu.corpus_bleu(hypotheses, [references]).score > 95  # measured: 99.3


@pytest.mark.slow
def test_translate_returns_input_order_whatever_batching(marian):
    src = ["ka lo mi tu re sa vo", "ka ka ka", "mi tu re", "lo lo lo ni", "sa vo ni pe du"]
    assert marian.translate(src, max_tokens=8) == [
        "AL BE CI DO EF GU HA",
        "AL AL AL",
        "CI DO EF",
        "BE BE BE IK",
        "GU HA IK JO KU",
    ]
    assert marian.translate(src[::-1], max_tokens=4096) == marian.translate(src, max_tokens=8)[::-1]


@pytest.mark.slow
def test_translate_truncates_a_source_longer_than_the_positions(marian):
    (hypothesis,) = marian.translate([" ".join(["ka"] * 100)], DecodeOptions(beam=2))
    assert len(hypothesis.split()) <= MAX_POSITIONS


@pytest.mark.slow
def test_sampling_with_a_seed_is_reproducible(marian):
    src = [s for s, _ in HELD_OUT[:8]]
    hot = DecodeOptions(sampling=True, temperature=3.0, seed=11)
    first = marian.translate(src, hot)
    assert marian.translate(src, hot) == first
    assert marian.translate(src, DecodeOptions(sampling=True, temperature=3.0, seed=12)) != first
    cold = marian.translate(src, DecodeOptions(sampling=True, topk=1, seed=12))  # top-1 sampling is greedy
    assert cold == marian.translate(src, DecodeOptions(beam=1))

"""models/nmt/ctranslate2.py: the tiny Marian of tests/models/test_nmt_transformers.py converted, checked against the
transformers backend token by token; a tiny NLLB-style model for the language-token conventions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_nmt_transformers import HELD_OUT, MAX_POSITIONS, SRC_WORDS, TGT_WORDS, made_up_pairs, tiny_marian_dir

from conf.errors import ModelError
from conf.offline import go_offline
from models.nmt import DecodeOptions, ModelCard, load_model
from models.nmt.ctranslate2 import CT2Model, PieceCodec, TokenizerCodec, convert_transformers, load_codec, source_specials
from models.nmt.subwords import train_sentencepiece
from models.nmt.transformers import TransformersModel
from storage.artifacts import hash_inputs

go_offline()


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return tiny_marian_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def converted(marian_dir, tmp_path_factory) -> Path:
    return convert_transformers(marian_dir, tmp_path_factory.mktemp("ct2") / "tiny-marian-ct2")


@pytest.fixture(scope="module")
def ct2(converted) -> CT2Model:
    return load_model(converted, threads=1)


@pytest.fixture(scope="module")
def hf(marian_dir) -> TransformersModel:
    return load_model(marian_dir, threads=1)


def test_piece_codec_from_a_card_naming_a_sentencepiece_model(tmp_path):
    """A fairseq conversion: pieces on both sides, no specials (CTranslate2 appends the source's </s>)."""
    train_sentencepiece([s for pair in made_up_pairs(200, seed=3) for s in pair], tmp_path / "spm.model", vocab_size=100)
    card = ModelCard(backend="ctranslate2", subwords="spm.model", converted_from="fairseq")
    codec = load_codec(tmp_path, card)
    assert isinstance(codec, PieceCodec) and codec.prefix == []
    pieces = codec.source(["ka lo mi", ""])
    assert pieces == [["▁ka", "▁lo", "▁", "mi"], []] and codec.target(["AL BE"]) == [["▁AL", "▁BE"]]
    assert [codec.has_text(p) for p in pieces] == [True, False]
    assert codec.decode(pieces) == ["ka lo mi", ""]
    (tmp_path / "config.json").write_text(json.dumps({"add_source_bos": False, "add_source_eos": True}))
    assert source_specials(tmp_path) == 1


def test_load_without_model_bin_says_convert_first(tmp_path):
    with pytest.raises(ModelError, match=r"no CTranslate2 model.bin. Hint: convert the model first"):
        CT2Model.load(tmp_path)


@pytest.mark.slow
def test_convert_writes_the_card_tokenizer_and_vocabulary(converted, marian_dir, hf):
    card = ModelCard.read(converted)
    assert (card.backend, card.subwords, card.converted_from) == ("ctranslate2", None, "transformers")
    assert card.source_fingerprint == hash_inputs([marian_dir]) == hf.fingerprint()
    assert card.meta == {"max_positions": MAX_POSITIONS, "source": str(marian_dir)}
    assert {"model.bin", "tokenizer.json", "augdag_nmt.json"} <= {p.name for p in converted.iterdir()}
    # Marian's <pad> (the last id, only the decoder's start) is dropped: CTranslate2 starts from a zero embedding
    vocabulary = json.loads((converted / "shared_vocabulary.json").read_text())
    assert vocabulary == ["</s>", "<unk>", *SRC_WORDS, *TGT_WORDS]


@pytest.mark.slow
def test_convert_refuses_a_directory_that_is_not_empty(marian_dir, tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ModelError, match=r"exists and is not empty"):
        convert_transformers(marian_dir, tmp_path)


@pytest.mark.slow
def test_load_model_picks_ctranslate2_from_the_card(ct2):
    assert (type(ct2), ct2.backend, ct2.device, ct2.max_positions, ct2.source_extra) == (
        CT2Model,
        "ctranslate2",
        "cpu",
        MAX_POSITIONS,
        0,
    )
    assert isinstance(ct2.codec, TokenizerCodec) and ct2.codec.prefix == []
    # Marian: the source carries its </s>; the target leaves it to CTranslate2
    assert ct2.codec.source(["ka lo zz"]) == [["ka", "lo", "<unk>", "</s>"]]
    assert ct2.codec.target(["AL BE"]) == [["AL", "BE"]]


@pytest.mark.slow
def test_scores_agree_with_transformers_token_by_token(ct2, hf):
    src, tgt = [s for s, _ in HELD_OUT], [t for _, t in HELD_OUT]
    ours, theirs = ct2.score(src, tgt, max_tokens=64), hf.score(src, tgt)
    assert [len(a) for a in ours] == [len(t.split()) + 1 for t in tgt]  # EOS included
    assert all(a.dtype == np.float32 for a in ours)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))
    assert worst < 1e-4  # measured: 7e-7 in float32


@pytest.mark.slow
def test_score_gives_none_where_transformers_does(ct2, hf):
    too_long = " ".join(["ka"] * MAX_POSITIONS)
    longest = " ".join(["ka"] * (MAX_POSITIONS - 1))
    src = ["ka lo mi", "ka lo mi", "", too_long, "mi tu re sa", longest]
    tgt = ["AL BE CI", "", "AL", "AL", "CI DO EF GU", "AL"]
    ours, theirs = ct2.score(src, tgt), hf.score(src, tgt)
    assert [None if a is None else len(a) for a in ours] == [4, None, None, None, 5, 2]
    for a, b in zip(ours, theirs):
        assert (a is None and b is None) or np.abs(a - b).max() < 1e-4


@pytest.mark.slow
def test_beam_translations_equal_transformers(ct2, hf):
    src = [s for s, _ in HELD_OUT]
    ours, theirs = ct2.translate(src, max_tokens=64), hf.translate(src)
    # two beam searches in float32 (CTranslate2's kernels vs torch's): measured 60 of 60 here; a near-tie may
    # flip a sentence on another CPU, so two are allowed. A wrong codec or order would match almost none.
    assert sum(a == b for a, b in zip(ours, theirs)) >= len(src) - 2
    assert ct2.translate(src[::-1]) == ours[::-1]  # input order, whatever the batches


@pytest.mark.slow
def test_translate_truncates_a_source_longer_than_the_positions(ct2):
    (hypothesis,) = ct2.translate([" ".join(["ka"] * 100)], DecodeOptions(beam=2))
    assert len(hypothesis.split()) <= MAX_POSITIONS


@pytest.mark.slow
def test_sampling_with_a_seed_is_reproducible(ct2):
    src = [s for s, _ in HELD_OUT[:8]]
    hot = DecodeOptions(sampling=True, temperature=3.0, seed=11)
    first = ct2.translate(src, hot)
    assert ct2.translate(src, hot) == first  # a fresh translator per call: CT2 seeds a thread's generator once
    assert ct2.translate(src, DecodeOptions(sampling=True, temperature=3.0, seed=12)) != first
    greedy = ct2.translate(src, DecodeOptions(beam=1))
    assert ct2.translate(src, DecodeOptions(sampling=True, topk=1, seed=12)) == greedy  # top-1 sampling is greedy


@pytest.mark.slow
def test_int8_compute_type_keeps_most_translations(converted, ct2):
    int8 = load_model(converted, threads=1, compute_type="int8")
    src = [s for s, _ in HELD_OUT]
    same = sum(a == b for a, b in zip(int8.translate(src), ct2.translate(src)))
    assert same >= 50  # measured: 60 of 60


def nllb_style_dir(out: Path) -> Path:
    """An untrained one-layer M2M100 with an NLLB tokenizer (eng_Latn → fra_Latn) over the made-up words."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    chars = sorted({c for w in SRC_WORDS + TGT_WORDS for c in w})
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "▁": 4}
    for piece in ["▁" + c for c in chars] + chars + ["▁" + w for w in SRC_WORDS + TGT_WORDS]:
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", c) for c in chars] + [("▁" + w[0], w[1:]) for w in SRC_WORDS + TGT_WORDS]
    tokenizer = NllbTokenizer(
        vocab=vocab, merges=merges, extra_special_tokens=["eng_Latn", "fra_Latn"], src_lang="eng_Latn", tgt_lang="fra_Latn"
    )
    config = M2M100Config(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=32,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        scale_embedding=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        M2M100ForConditionalGeneration(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_nllb_style_language_tokens_are_the_source_start_and_the_target_prefix(tmp_path):
    hf = load_model(nllb_style_dir(tmp_path / "nllb"), threads=1)
    ct2 = load_model(convert_transformers(tmp_path / "nllb", tmp_path / "nllb-ct2"), threads=1)
    assert hf.tokenizer.convert_ids_to_tokens(hf.prefix) == ct2.codec.prefix == ["fra_Latn"]
    assert ct2.codec.source(["ka lo"]) == [["eng_Latn", "▁ka", "▁lo", "</s>"]]
    assert ct2.codec.target(["AL BE"]) == [["fra_Latn", "▁AL", "▁BE"]]
    src, tgt = [s for s, _ in HELD_OUT[:20]], [t for _, t in HELD_OUT[:20]]
    ours, theirs = ct2.score(src, tgt), hf.score(src, tgt)
    assert [len(a) for a in ours] == [len(b) for b in theirs] == [len(t.split()) + 2 for t in tgt]  # lang, …, </s>
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs)) < 1e-4
    options = DecodeOptions(beam=2, max_len_a=0, max_len_b=6)
    same = [a == b for a, b in zip(ct2.translate(src, options), hf.translate(src, options))]
    assert sum(same) >= len(src) - 1  # two float32 beam searches: 20 of 20 here, one near-tie allowed elsewhere

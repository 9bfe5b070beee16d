"""CWE (tasks/epida/cwe.py, models/masked_lm.py) with a tiny random BERT masked LM built and saved here, loaded
through the same code as a user's model: whole-word substitutions only, seeded per row, independent of the
shard and the batch, the argmax at a near-zero temperature, and a flow run with `sources: [cwe]`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from conf.errors import ModelError
from conf.offline import go_offline
from storage.schemas import with_uid
from tasks.epida.cwe import cwe_candidates, draw, pick_positions

go_offline()
torch.set_num_threads(1)
WORDS = ["the", "a", "cat", "dog", "bird", "sees", "eats", "chases", "small", "big", "red", "fish", "tree", "house", "runs"]
EXTRA = ["##s", "##ing", "[unused0]", "?"]


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *EXTRA, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
    )
    torch.manual_seed(0)
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=0,
            initializer_range=0.5,
        )
    )
    out = tmp_path_factory.mktemp("tiny-mlm")
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def rows(texts: list[str], source: str = "t") -> pa.Table:
    table = pa.table(
        {
            "text": texts,
            "label": ["x"] * len(texts),
            "source": [source] * len(texts),
            "line": pa.array(range(1, len(texts) + 1), pa.int64()),
        }
    )
    return with_uid(table, "labeled")


TEXTS = ["the cat sees a small bird", "a big dog eats the red fish", "the bird runs", "dog"]


def cwe(table, mlm_dir, **kw):
    return cwe_candidates(table, model_path=str(mlm_dir), device="cpu", threads=1, **{"n_aug": 3, **kw})


def test_one_whole_word_changes_per_candidate_and_everything_else_is_kept(mlm_dir):
    table = rows(TEXTS)
    out = cwe(table, mlm_dir, alpha=0.1)
    assert out.num_rows == 12 and out.column_names == [
        "uid",
        "text",
        "label",
        "source",
        "line",
        "parent_uid",
        "method",
        "candidate",
    ]
    assert set(out["method"].to_pylist()) == {"cwe"} and out["candidate"].to_pylist() == [0, 1, 2] * 4
    assert out["parent_uid"].to_pylist() == [u for u in table["uid"].to_pylist() for _ in range(3)]
    assert out["line"].to_pylist() == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    for cand, parent in zip(out["text"].to_pylist(), [t for t in TEXTS for _ in range(3)]):
        old, new = parent.split(), cand.split()
        changed = [(a, b) for a, b in zip(old, new) if a != b]
        assert len(new) == len(old) and len(changed) == 1  # n = max(1, ⌊0.1 · l⌋) = 1
        assert changed[0][1] in WORDS  # a whole word: never [MASK], ##s, [unused0], '?' or a special token


def test_the_draws_are_seeded_per_row_not_per_shard_or_batch(mlm_dir):
    table = rows(TEXTS)
    out = cwe(table, mlm_dir, alpha=0.5)
    assert cwe(table, mlm_dir, alpha=0.5, batch_size=1).equals(out)
    alone = cwe(table.slice(1, 1), mlm_dir, alpha=0.5)
    assert alone["text"].to_pylist() == out["text"].to_pylist()[3:6]
    assert cwe(table, mlm_dir, alpha=0.5, seed=1)["text"].to_pylist() != out["text"].to_pylist()
    assert cwe(table, mlm_dir, alpha=0.5, round=1)["text"].to_pylist() != out["text"].to_pylist()
    assert cwe(table, mlm_dir, alpha=0.0)["text"].to_pylist() == [t for t in TEXTS for _ in range(3)]


def test_near_zero_temperature_and_top_1_pick_the_models_argmax(mlm_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = cwe(rows(["the cat sees a small bird"]), mlm_dir, alpha=0.1, n_aug=1, temperature=1e-4, top_k=1)
    new = out["text"][0].as_py().split()
    i = next(k for k, (a, b) in enumerate(zip(["the", "cat", "sees", "a", "small", "bird"], new)) if a != b)
    tok, model = AutoTokenizer.from_pretrained(mlm_dir), AutoModelForMaskedLM.from_pretrained(mlm_dir).eval()
    words = ["the", "cat", "sees", "a", "small", "bird"]
    masked = " ".join("[MASK]" if k == i else w for k, w in enumerate(words))
    with torch.inference_mode():
        logits = model(**tok(masked, return_tensors="pt")).logits[0, i + 1]  # +1: [CLS]
    allowed = [tok.convert_tokens_to_ids(w) for w in WORDS if w != words[i]]
    assert new[i] == tok.convert_ids_to_tokens(allowed[int(torch.argmax(logits[allowed]))])


def test_positions_prefer_content_words_and_draws_follow_the_distribution():
    rng = np.random.default_rng(0)
    assert all(set(pick_positions(["the", "cat", "and", "a", "dog"], 2, rng)) == {1, 4} for _ in range(20))
    assert len(pick_positions(["the", "a", "of"], 2, rng)) == 2  # only stop words: any word
    p, words = np.array([0.5, 0.3, 0.2]), ["cat", "dog", "bird"]
    counts = dict.fromkeys(words, 0)
    for _ in range(4000):
        counts[draw(p, words, "cat", 0, rng)] += 1
    assert counts["cat"] == 0  # never the word itself
    assert counts["dog"] / 4000 == pytest.approx(0.6, abs=0.03)  # 0.3 / (0.3 + 0.2)
    assert {draw(p, words, "bird", 1, rng) for _ in range(50)} == {"cat"}  # top-1 without the original


def test_a_missing_model_names_the_path(tmp_path):
    with pytest.raises(ModelError, match=str(tmp_path / "nope")):
        cwe_candidates(rows(["a cat"]), model_path=str(tmp_path / "nope"), device="cpu")

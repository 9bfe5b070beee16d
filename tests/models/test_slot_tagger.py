"""The slot tagger (models/tagger): conlleval span F1 on hand-made tags; the paper's Bi-LSTM (with and without
a CRF) learning a made-up slot language with held-out values; the best-dev epoch kept; determinism, batch
independence and save/load; the Hugging Face path with a tiny random BERT built and saved here, loaded by
path like a user's model (first-sub-token alignment, truncation, a missing path)."""

from __future__ import annotations

import random

import pytest
import torch

from conf.errors import ConfError, InputError, ModelError
from conf.offline import go_offline
from models.tagger import SlotTagger, TaggerSettings, span_f1, span_scores, train_tagger
from models.tagger.hf import IGNORE, align_labels

go_offline()
torch.set_num_threads(1)

CITIES = [
    "boston",
    "denver",
    "new york",
    "los angeles",
    "dallas",
    "seattle",
    "san francisco",
    "atlanta",
    "chicago",
    "miami",
    "salt lake city",
    "phoenix",
    "detroit",
    "st louis",
    "tampa",
    "orlando",
    "memphis",
    "baltimore",
    "san diego",
    "newark",
    "pittsburgh",
    "oakland",
    "cleveland",
    "nashville",
]
PLACES = ["luigi's", "the golden dragon", "chez marie", "blue fin", "taco town", "the olive tree", "sakura", "burger barn"]
HELD_CITIES = ["portland", "las vegas", "houston", "kansas city", "toronto", "montreal", "san jose", "charlotte"]
HELD_PLACES = ["la piazza", "noodle house", "el toro", "the ivy"]  # never in training: <unk> to the Bi-LSTM
NUMS = ["two", "three", "four", "five", "six"]


def span(words: list[str], slot: str) -> list[str]:
    return [f"B-{slot}"] + [f"I-{slot}"] * (len(words) - 1)


def language(n: int, cities: list[str], places: list[str], seed: int) -> list[tuple[list[str], list[str]]]:
    """n sentences of four templates (flights from/to, a table at a restaurant for a party size), seeded."""
    r, rows = random.Random(seed), []
    for k in range(n):
        a, b = (c.split() for c in r.sample(cities, 2))
        p, m = r.choice(places).split(), [r.choice(NUMS)]
        rows.append(
            [
                (["fly", "from", *a, "to", *b], ["O", "O", *span(a, "fromloc"), "O", *span(b, "toloc")]),
                (["show", "flights", "to", *b, "from", *a], ["O", "O", "O", *span(b, "toloc"), "O", *span(a, "fromloc")]),
                (
                    ["book", "a", "table", "at", *p, "for", *m],
                    ["O", "O", "O", "O", *span(p, "restaurant"), "O", *span(m, "party_size")],
                ),
                (
                    ["book", *p, "in", *a, "for", *m, "people"],
                    ["O", *span(p, "restaurant"), "O", *span(a, "city"), "O", *span(m, "party_size"), "O"],
                ),
            ][k % 4]
        )
    return rows


TRAIN = language(60, CITIES, PLACES, 0)
DEV, TEST = language(20, HELD_CITIES, HELD_PLACES, 1), language(40, HELD_CITIES, HELD_PLACES, 2)
SMALL = TaggerSettings(epochs=12, batch_size=16)  # the paper's network; fewer epochs, smaller batches (60 rows)


def tokens(rows):
    return [t for t, _ in rows]


def gold(rows):
    return [g for _, g in rows]


def train(tmp_path, name, settings=SMALL, *, dev=DEV, rows=TRAIN):
    record = train_tagger(rows, tmp_path / name, settings, dev=dev, device="cpu", threads=1)
    return record, SlotTagger.load(tmp_path / name, device="cpu", threads=1)


@pytest.fixture(scope="module")
def bilstm(tmp_path_factory):
    return train(tmp_path_factory.mktemp("tagger"), "bilstm")


# -- span F1, conlleval's convention


def test_span_scores_count_an_i_after_o_as_a_span_start_like_conlleval():
    gold_tags = [["B-from", "I-from", "O", "B-to"], ["O", "B-city", "I-city", "O"], ["B-size", "O"]]
    pred_tags = [
        ["B-from", "I-from", "O", "B-to"],  # 2 right
        ["O", "O", "I-city", "O"],  # I- after O starts a span: city [2, 2], a boundary error (gold [1, 2])
        ["B-size", "B-x"],
    ]  # 1 right, 1 spurious
    scores = span_scores(gold_tags, pred_tags)
    assert (scores["gold_spans"], scores["pred_spans"], scores["correct"]) == (4, 5, 3)
    assert scores["precision"] == pytest.approx(3 / 5) and scores["recall"] == pytest.approx(3 / 4)
    assert scores["f1"] == pytest.approx(2 / 3)  # 2 · (3/5 · 3/4) / (3/5 + 3/4)
    assert span_f1(gold_tags, pred_tags) == scores["f1"]


def test_span_scores_split_a_type_change_and_join_i_runs():
    scores = span_scores([["B-a", "I-b", "I-b", "O", "I-c", "I-c"]], [["B-a", "I-a", "I-b", "O", "I-c", "I-c"]])
    # gold: a[0], b[1-2], c[4-5]; pred: a[0-1], b[2], c[4-5]
    assert (scores["gold_spans"], scores["pred_spans"], scores["correct"]) == (3, 3, 1)
    assert scores["f1"] == pytest.approx(1 / 3)
    assert span_scores([["O", "O"]], [["O", "O"]])["f1"] == 0.0  # no span anywhere: the undefined ratio is 0


def test_span_f1_names_the_row_whose_lengths_differ():
    with pytest.raises(InputError, match="row 1: 3 gold tags but 2 predicted") as err:
        span_f1([["O"], ["B-a", "O", "O"]], [["O"], ["B-a", "O"]])
    assert not isinstance(err.value, ValueError)
    with pytest.raises(InputError, match="2 gold rows but 1 predicted"):
        span_f1([["O"], ["O"]], [["O"]])


# -- the Bi-LSTM


def test_bilstm_learns_the_slot_language_with_held_out_values(bilstm):
    record, tagger = bilstm
    assert tagger.tags == (
        "O",
        "B-city",
        "B-fromloc",
        "B-party_size",
        "B-restaurant",
        "B-toloc",
        "I-city",
        "I-fromloc",
        "I-restaurant",
        "I-toloc",
    )
    assert record["epochs"] == 12 and len(record["losses"]) == len(record["dev_f1"]) == 12
    assert record["losses"][-1] < record["losses"][0] / 10
    # measured (torch 2.13, CPU): dev F1 1.0 from epoch 5; test F1 0.967 (88 of 90 spans)
    assert max(record["dev_f1"]) >= 0.9 and span_f1(gold(TEST), tagger.predict(tokens(TEST))) >= 0.9
    assert span_f1(gold(DEV), tagger.predict(tokens(DEV))) == max(record["dev_f1"])  # the best epoch's parameters
    assert "Bi-LSTM 2x128x2 over 300-d embeddings" in tagger.describe()


def test_bilstm_crf_learns_the_slot_language(tmp_path):
    record, tagger = train(tmp_path, "crf", TaggerSettings(crf=True, epochs=12, batch_size=16))
    assert tagger.settings.crf and "+ CRF" in tagger.describe()
    # measured: dev F1 1.0 from epoch 4; test F1 1.0
    assert max(record["dev_f1"]) >= 0.9 and span_f1(gold(TEST), tagger.predict(tokens(TEST))) >= 0.9
    assert span_f1(gold(DEV), tagger.predict(tokens(DEV))) == max(record["dev_f1"])


def test_best_dev_epoch_parameters_are_the_ones_saved(bilstm, tmp_path):
    record, _ = bilstm
    best = record["best_epoch"]
    assert best < record["epochs"]  # dev F1 reaches its maximum early; later equal epochs do not replace it
    assert record["dev_f1"][best - 1] == max(record["dev_f1"]) > max(record["dev_f1"][: best - 1])
    # the same seed stopped at the best epoch, without dev, writes exactly the kept weights
    short = train_tagger(TRAIN, tmp_path / "short", TaggerSettings(epochs=best, batch_size=16), device="cpu", threads=1)
    assert short["losses"] == record["losses"][:best] and short["best_epoch"] == best and short["dev_f1"] == []
    from safetensors.torch import load_file

    kept, stopped = (load_file(str(p / "model.safetensors")) for p in (bilstm[1].path, tmp_path / "short"))
    assert kept.keys() == stopped.keys() and all(torch.equal(kept[k], stopped[k]) for k in kept)


def test_same_seed_same_tagger_other_seed_other_tagger(bilstm, tmp_path):
    record, tagger = bilstm
    again, tagger_again = train(tmp_path, "again")
    assert again["losses"] == record["losses"] and again["dev_f1"] == record["dev_f1"]
    assert tagger_again.predict(tokens(TEST)) == tagger.predict(tokens(TEST))
    other = train_tagger(TRAIN, tmp_path / "other", TaggerSettings(epochs=2, batch_size=16, seed=1), device="cpu", threads=1)
    assert other["losses"] != record["losses"][:2]


def test_predict_is_independent_of_batch_size_and_survives_save_and_load(bilstm, tmp_path):
    _, tagger = bilstm
    sentences = [*tokens(TEST), [], ["fly", "from", "nowhere", "to", "anywhere"], ["Book"]]
    pred = tagger.predict(sentences)
    assert [len(p) for p in pred] == [len(s) for s in sentences] and pred[len(TEST)] == []
    assert tagger.predict(sentences, batch_size=1) == tagger.predict(sentences, batch_size=7) == pred
    assert {t for row in pred for t in row} <= set(tagger.tags)
    tagger.save(tmp_path / "copy")
    copy = SlotTagger.load(tmp_path / "copy", device="cpu", threads=1)
    assert copy.predict(sentences) == pred and copy.trained == tagger.trained
    assert copy.fingerprint() == tagger.fingerprint()


def test_rows_settings_and_paths_are_checked(tmp_path):
    with pytest.raises(InputError, match="train: row 1: 2 tokens but 1 tags"):
        train_tagger([(["a"], ["O"]), (["a", "b"], ["O"])], tmp_path / "x", SMALL, device="cpu", threads=1)
    with pytest.raises(InputError, match="row 0 is a string"):
        SlotTagger.load(bilstm_dir(tmp_path), device="cpu", threads=1).predict(["fly from boston"])
    with pytest.raises(ConfError, match="tagger.model"):
        TaggerSettings(kind="hf")
    with pytest.raises(ConfError, match="tagger.crf"):
        TaggerSettings(kind="hf", model="bert-base-cased", crf=True)
    missing = tmp_path / "no-such-tagger"
    with pytest.raises(ModelError, match=f"{missing}: no such directory; expected a slot tagger directory"):
        SlotTagger.load(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="empty: no tagger.json"):
        SlotTagger.load(tmp_path / "empty")


def bilstm_dir(tmp_path):
    """A one-epoch tagger on four rows (for the checks that need any tagger at all)."""
    train_tagger(TRAIN[:4], tmp_path / "tiny", TaggerSettings(epochs=1, embedding_dim=8, hidden=4), device="cpu", threads=1)
    return tmp_path / "tiny"


# -- Hugging Face


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A random 1-layer BERT encoder (no token-classification head) whose WordPiece vocabulary has the template
    words whole and every slot-value word longer than 2 letters as two pieces: "boston" → bo ##ston."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    values = sorted({w for v in CITIES + PLACES + NUMS for w in v.split()})
    words = sorted({w for row in tokens(TRAIN) for w in row} - set(values))
    pieces = [p for w in values for p in ([w[:2], "##" + w[2:]] if len(w) > 2 else [w])]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *pieces]))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
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
    model = BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=0,
        )
    )
    out = tmp_path_factory.mktemp("tiny-bert")
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def test_align_labels_puts_a_word_tag_on_its_first_sub_token_only():
    labels, first = align_labels([None, 0, 1, 1, 1, 2, None], [3, 4, 5])
    assert labels == [IGNORE, 3, 4, IGNORE, IGNORE, 5, IGNORE] and first == {0: 1, 1: 2, 2: 5}
    assert align_labels([None, 0, 0, None])[0] == [IGNORE] * 4  # no tags: prediction only


def test_hf_tagger_learns_the_slot_language_one_tag_per_word(bert_dir, tmp_path):
    from transformers import AutoTokenizer

    seen_dev, seen_test = language(20, CITIES, PLACES, 1), language(40, CITIES, PLACES, 2)  # new sentences
    settings = TaggerSettings(kind="hf", model=str(bert_dir), lr=1e-2, epochs=20, batch_size=16)
    record, tagger = train(tmp_path, "hf", settings, dev=seen_dev)
    # measured: dev F1 0.899 at epoch 14 (0.822 at the last), test F1 0.945; a random 1-layer BERT knows no
    # words, so the values are ones seen in training, in new sentences
    assert max(record["dev_f1"]) >= 0.85 and span_f1(gold(seen_test), tagger.predict(tokens(seen_test))) >= 0.85
    assert span_f1(gold(seen_dev), tagger.predict(tokens(seen_dev))) == max(record["dev_f1"])
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "tagger.json").is_file()
    assert AutoTokenizer.from_pretrained(bert_dir).tokenize("salt lake boston") == ["sa", "##lt", "la", "##ke", "bo", "##ston"]
    pred = tagger.predict([["fly", "from", "salt", "lake", "city", "to", "boston"]])[0]
    # one tag per word, multi-piece words included ("city", a word of its own, varies with the seed's draws)
    assert len(pred) == 7 and pred[:4] + pred[5:] == ["O", "O", "B-fromloc", "I-fromloc", "O", "B-toloc"]
    assert tagger.predict(tokens(seen_test), batch_size=1) == tagger.predict(tokens(seen_test))
    # 64 positions: [CLS] + 62 sub-tokens + [SEP] hold "fly from" and 30 two-piece words; the rest are O
    long = ["fly", "from", *["boston"] * 40]
    tags = tagger.predict([long])[0]
    assert len(tags) == 42 and tags[32:] == ["O"] * 10
    again = train_tagger(TRAIN, tmp_path / "hf-again", settings, dev=seen_dev, device="cpu", threads=1)
    assert again["losses"] == record["losses"]


def test_hf_missing_model_is_a_model_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match=f"{missing}: no Hugging Face token-classification model"):
        train_tagger(TRAIN, tmp_path / "out", TaggerSettings(kind="hf", model=str(missing), epochs=1), device="cpu", threads=1)

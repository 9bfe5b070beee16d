"""The C2C-GenDA generator (models/c2c, Hou et al., AAAI 2021): duplication-aware attention, the diverse-oriented
regulariser, training that overfits a toy set, generation (rank order, seeding, save/load) and
initialisation from a local GPT-2-style checkpoint. Tiny models built here, on one CPU thread."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conf.errors import ModelError
from models.c2c import (
    BOS,
    EOS,
    PAD,
    UNK,
    C2CGenerator,
    C2CSettings,
    DuplicationAwareAttention,
    diverse_regulariser,
    diverse_terms,
    rank_token,
    train_c2c,
)
from models.c2c.model import new_model
from models.c2c.serialise import Specials, build_tokenizer, cluster_batch, decode, encode
from models.c2c.train import to_tensors

torch.set_num_threads(1)

# four clusters of delexicalised ATIS-like utterances, each with its targets in rank order
PAIRS = [
    (
        [["show", "me", "flights", "from", "<fromloc.city_name>"], ["list", "flights", "from", "<fromloc.city_name>"]],
        [["i", "need", "a", "flight", "leaving", "<fromloc.city_name>"], ["what", "leaves", "<fromloc.city_name>", "today"]],
    ),
    (
        [["fares", "to", "<toloc.city_name>"], ["how", "much", "to", "fly", "to", "<toloc.city_name>"]],
        [
            ["what", "is", "the", "price", "to", "<toloc.city_name>"],
            ["cost", "of", "a", "ticket", "to", "<toloc.city_name>"],
            ["cheapest", "fare", "<toloc.city_name>"],
        ],
    ),
    (
        [["flights", "on", "<depart_date.day_name>"], ["leaving", "<depart_date.day_name>"]],
        [["anything", "departing", "<depart_date.day_name>", "morning"], ["<depart_date.day_name>", "flights", "please"]],
    ),
    (
        [["airlines", "at", "<airport_name>"], ["which", "carriers", "serve", "<airport_name>"]],
        [["list", "airlines", "flying", "out", "of", "<airport_name>"], ["what", "airlines", "use", "<airport_name>"]],
    ),
]
# γ = 0.1: with the regulariser as a mean over (i, j, t) terms, γ > 1/2 pays for mispredicting shared tokens
# (models/c2c/attention.py); 150 epochs × 4 clusters = 600 steps at the from-scratch lr 1e-3
OVERFIT = C2CSettings(epochs=150, gamma=0.1)
SPECIAL = {BOS, EOS, PAD, UNK} | {rank_token(r) for r in range(10)}


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    out = tmp_path_factory.mktemp("c2c") / "model"
    result = train_c2c(PAIRS, out, settings=OVERFIT, device="cpu", threads=1)
    return out, result


def tiny_batch(lam: float):
    torch.manual_seed(0)
    utterances = [u for inputs, outputs in PAIRS for u in (*inputs, *outputs)]
    model = new_model(C2CSettings(lam=lam, layers=2, d_model=32, heads=2), utterances).eval()
    inputs, outputs = PAIRS[1]
    batch = cluster_batch(
        [encode(model.tokenizer, u) for u in inputs],
        [encode(model.tokenizer, u) for u in outputs],
        model.specials,
        model.max_length,
        "PAIRS[1]",
    )
    return model, to_tensors(batch, "cpu")


def test_cluster_batch_serialises_prefix_rank_and_target_and_cuts_the_prefix_from_the_left():
    tokenizer = build_tokenizer([["a", "b"], ["c"], ["x"], ["y", "z"]], max_outputs=2)
    specials = Specials.of(tokenizer, 2)
    ids = [encode(tokenizer, u) for u in (["a", "b"], ["c"], ["x"], ["y", "z"])]
    batch = cluster_batch(ids[:2], ids[2:], specials, 512, "pair")
    rows = [tokenizer.convert_ids_to_tokens(row) for row in batch.input_ids]
    prefix = [BOS, "a", "b", EOS, BOS, "c", EOS]
    assert rows == [[*prefix, BOS, "<#0>", EOS, BOS, "x", PAD], [*prefix, BOS, "<#1>", EOS, BOS, "y", "z"]]
    assert batch.start == 10  # the target's <|bos|>: position start + k predicts labels[k]
    assert [tokenizer.convert_ids_to_tokens([i for i in row if i >= 0]) for row in batch.labels] == [["x", EOS], ["y", "z", EOS]]
    assert batch.labels[0][2] == -100 and batch.attention_mask[0] == [1] * 12 + [0]
    cut = cluster_batch(ids[:2], ids[2:], specials, 10, "pair")  # room for 4 prefix ids: only "c" stays
    assert tokenizer.convert_ids_to_tokens(cut.input_ids[1]) == [BOS, "c", EOS, BOS, "<#1>", EOS, BOS, "y", "z"]
    with pytest.raises(ModelError, match="pair: a target of 2 tokens does not fit in max_length=5"):
        cluster_batch(ids[:2], ids[2:], specials, 5, "pair")
    assert decode(tokenizer, [*batch.input_ids[1], specials.eos], specials) == ["a", "b", "c", "y", "z"]


def test_duplication_aware_attention_subtracts_lambda_times_context():
    model, b = tiny_batch(lam=0.25)
    with torch.no_grad():
        h_prime, _ = model.hidden(b["input_ids"], b["attention_mask"])
        window = h_prime[:, b["start"] :]
        h = model.dup(window, b["mask"])
        context = model.dup.context(window, b["mask"])
    assert window.shape == (3, 7, 32) and b["mask"].sum(1).tolist() == [7, 7, 4]
    assert torch.allclose(h - window, -0.25 * context, atol=1e-6)
    assert context.abs().sum() > 0  # non-vacuous: λ·h̄ really moves h


def test_duplication_aware_attention_lambda_zero_gives_plain_gpt2_logits():
    model, b = tiny_batch(lam=0.0)
    with torch.no_grad():
        ours = model.window_logits(b["input_ids"], b["attention_mask"], b["start"], b["mask"])
        plain = model.lm(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, b["start"] :]
    assert torch.equal(ours, plain)


def test_duplication_aware_attention_one_output_has_no_context():
    torch.manual_seed(1)
    dup = DuplicationAwareAttention(8, lam=0.5)
    h = torch.randn(1, 5, 8)
    with torch.no_grad():
        assert torch.equal(dup.context(h, torch.ones(1, 5, dtype=torch.bool)), torch.zeros(1, 5, 8))
        assert torch.equal(dup(h, torch.ones(1, 5, dtype=torch.bool)), h)


def test_duplication_aware_attention_ignores_own_row_future_and_padding():
    torch.manual_seed(2)
    dup = DuplicationAwareAttention(8, lam=0.5)
    h = torch.randn(3, 6, 8)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[2, 2:] = False  # output 2 has 2 real positions
    with torch.no_grad():
        before = dup.context(h, mask)[0, 2]
        changed = h.clone()
        changed[0, [0, 1, 3, 4, 5]] = torch.randn(5, 8)  # the row itself, except the query position
        changed[1:, 3:] = torch.randn(2, 3, 8)  # the others' future positions t′ > t
        changed[2, 2] = torch.randn(8)  # padding of output 2 at t′ = t
        assert torch.equal(dup.context(changed, mask)[0, 2], before)
        changed[1, 1] = torch.randn(8)  # another output's past position: it must count
        assert not torch.allclose(dup.context(changed, mask)[0, 2], before)


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q, strict=True))


def test_diverse_regulariser_equals_hand_computed_kl_sum():
    p = [
        [[0.5, 0.3, 0.2], [0.7, 0.2, 0.1]],  # output 0 at steps 0, 1
        [[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]],
    ]  # output 1
    log_probs = torch.tensor(p, dtype=torch.float64).log()
    both = torch.ones(2, 2, dtype=torch.bool)
    expected = -sum(kl(p[i][t], p[j][t]) for t in (0, 1) for i, j in ((0, 1), (1, 0)))
    assert expected == pytest.approx(-2.4145270, rel=1e-6)
    assert diverse_regulariser(log_probs, both).item() == pytest.approx(expected, rel=1e-6)
    assert diverse_regulariser(log_probs, both, detach_other=True).item() == pytest.approx(expected, rel=1e-6)
    assert diverse_terms(both) == 4

    masked = torch.tensor([[True, True], [True, False]])  # output 1 ended before step 1
    only_step_0 = -(kl(p[0][0], p[1][0]) + kl(p[1][0], p[0][0]))
    assert diverse_regulariser(log_probs, masked).item() == pytest.approx(only_step_0, rel=1e-6)
    other = log_probs.clone()
    other[1, 1] = torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64).log()  # the masked position changes
    assert diverse_regulariser(other, masked).item() == pytest.approx(only_step_0, rel=1e-6)
    assert diverse_terms(masked) == 2


def test_diverse_regulariser_matches_pairwise_loop_with_padding():
    torch.manual_seed(3)
    log_probs = torch.log_softmax(torch.randn(3, 4, 5, dtype=torch.float64), dim=-1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    p = log_probs.exp().tolist()
    loop = -sum(
        kl(p[i][t], p[j][t]) for t in range(4) for i in range(3) for j in range(3) if i != j and mask[i, t] and mask[j, t]
    )
    assert diverse_regulariser(log_probs, mask).item() == pytest.approx(loop, rel=1e-9)
    assert diverse_terms(mask) == 6 + 6 + 2 + 0


def test_train_c2c_overfits_four_clusters_and_reproduces_targets_by_rank(overfit):
    out, result = overfit
    assert result["steps"] == 600 and len(result["losses"]) == len(result["nll"]) == 150
    assert result["nll"][0] > 3.0 and result["nll"][-1] < 0.1  # measured: 4.03 → 0.0084 (0.062 at worst in the last 5)
    assert result["reg"][-1] < 0  # R_diverse / terms: −KL, pushed apart
    card = json.loads((out / "c2c.json").read_text())
    assert (card["lam"], card["gamma"], card["lr"], card["tokens"]["ranks"][9]) == (0.01, 0.1, 1e-3, "<#9>")
    generator = C2CGenerator.load(out, device="cpu", threads=1)
    got = generator.generate([inputs for inputs, _ in PAIRS], n_outputs=3, temperature=1e-3)
    for (_, targets), outputs in zip(PAIRS, got, strict=True):
        assert outputs[: len(targets)] == targets  # <#0> first, as trained


def test_c2c_generator_round_trip_seeding_and_outputs(overfit):
    out, _ = overfit
    first = C2CGenerator.load(out, device="cpu", threads=1)
    again = C2CGenerator.load(out, device="cpu", threads=1)
    clusters = [inputs for inputs, _ in PAIRS]
    hot = {"n_outputs": 10, "temperature": 20.0, "max_tokens": 8}  # hot enough that draws differ by seed
    together = first.generate(clusters, seed=7, **hot)
    assert again.generate(clusters, seed=7, **hot) == together
    assert first.generate([clusters[2]], seed=7, **hot) == [together[2]]  # a cluster alone ≡ among others
    assert first.generate(clusters[::-1], seed=7, **hot) == together[::-1]
    assert first.generate(clusters, seed=8, **hot) != together
    assert [len(outputs) for outputs in together] == [10, 10, 10, 10]
    words = [w for outputs in together for u in outputs for w in u]
    assert words and not SPECIAL & set(words) and max(len(u) for o in together for u in o) <= 8
    assert [len(o) for o in first.generate(clusters[:1], n_outputs=1)] == [1]
    assert "from scratch" in first.describe() and first.fingerprint() == again.fingerprint()
    with pytest.raises(ModelError, match="n_outputs = 11"):
        first.generate(clusters, n_outputs=11)


def test_joint_decoding_agrees_with_the_training_forward_pass(overfit):
    """Decoding one token per step with the KV cache and h̄′ over the rows so far gives, at T → 0, the
    argmax of the batch forward pass (prefix + targets, padding masked) on its own outputs."""
    out, _ = overfit
    generator = C2CGenerator.load(out, device="cpu", threads=1)
    model = generator.model
    inputs = PAIRS[1][0]
    model.dup.lam = 0.07  # 7x the trained λ: the other rows' states change the outputs (0.06–0.08 do, on this model)
    got = generator.generate([inputs], n_outputs=3, temperature=1e-3, max_tokens=12)[0]
    assert got != PAIRS[1][1] and len({len(u) for u in got}) > 1 and max(len(u) for u in got) < 12  # padding
    batch = to_tensors(
        cluster_batch(
            [encode(model.tokenizer, u) for u in inputs],
            [encode(model.tokenizer, u) for u in got],
            model.specials,
            model.max_length,
            "generated",
        ),
        "cpu",
    )
    with torch.no_grad():
        logits = model.window_logits(batch["input_ids"], batch["attention_mask"], batch["start"], batch["mask"])
    logits[..., list(model.specials.banned)] = float("-inf")
    mask = batch["mask"]
    assert torch.equal(logits.argmax(-1)[mask], batch["labels"][mask])


def test_c2c_generator_missing_path_is_a_model_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match=f"{missing}: does not exist.*train_c2c"):
        C2CGenerator.load(missing, device="cpu")


def tiny_gpt2_checkpoint(path):
    """A random 1-layer GPT-2 with a byte-level BPE tokenizer trained on the toy words (no slot tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    text = [" ".join(w for w in u if not w.startswith("<")) for inputs, outputs in PAIRS for u in (*inputs, *outputs)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def test_train_c2c_from_a_local_gpt2_checkpoint(tmp_path):
    tiny_gpt2_checkpoint(tmp_path / "gpt2")
    out = tmp_path / "c2c"
    result = train_c2c(PAIRS, out, settings=C2CSettings(init=str(tmp_path / "gpt2"), epochs=1), device="cpu", threads=1)
    assert result["steps"] == 4 and len(result["losses"]) == 1
    card = json.loads((out / "c2c.json").read_text())
    assert (card["lr"], card["max_length"]) == (6.25e-5, 128)  # the authors' rate; the checkpoint's positions

    generator = C2CGenerator.load(out, device="cpu", threads=1)
    tokenizer = generator.model.tokenizer
    for token in ["<fromloc.city_name>", "<airport_name>", "<#0>", "<#9>", BOS, EOS]:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token
    ids = encode(tokenizer, ["flights", "from", "<fromloc.city_name>", "today"])
    assert tokenizer.convert_tokens_to_ids("<fromloc.city_name>") in ids
    got = generator.generate([PAIRS[0][0]], n_outputs=3, max_tokens=6, temperature=1.0)
    assert len(got) == 1 and len(got[0]) == 3
    assert all(len(u) <= 6 and not SPECIAL & set(u) for u in got[0])
    assert f"init {tmp_path / 'gpt2'}" in generator.describe()


def test_train_c2c_refuses_a_missing_init_and_too_many_outputs(tmp_path):
    with pytest.raises(ModelError, match="no-such-checkpoint"):
        train_c2c(PAIRS, tmp_path / "m", settings=C2CSettings(init=str(tmp_path / "no-such-checkpoint")), device="cpu", threads=1)
    with pytest.raises(ModelError, match=r"pairs\[0\]: 3 output utterances; expected 1 … 2"):
        train_c2c([(PAIRS[0][0], PAIRS[1][1])], tmp_path / "m", settings=C2CSettings(max_outputs=2), device="cpu", threads=1)

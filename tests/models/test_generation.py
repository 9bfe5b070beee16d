"""models/generation.py: bottom-k (PCC Eq. 2) as a LogitsProcessor, the HF and round-trip paraphrasers, bags.

The seq2seq model is the tiny Marian of tests/models/test_nmt_transformers.py (trained once per session); the
causal LM is a tiny random GPT-2 saved and loaded like a user's model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conf.errors import ModelError
from conf.offline import go_offline
from models.bottom_k import BottomKLogitsProcessor
from models.candidates import BOTTOM_K, TOP_K_TOP_P, candidate_bag, copies_first_token, distinct_n
from models.generation import HFParaphraser, RoundTripParaphraser, Sampler, pcc_samplers
from models.nmt import DecodeOptions, load_model
from tests.models.test_nmt_transformers import made_up_pairs, tiny_marian_dir, word_level_tokenizer

_DEFAULT_OPTIONS = DecodeOptions()  # one shared default, as a frozen dataclass allows

go_offline()
SRC = [s for s, _ in made_up_pairs(12, seed=3)]


# ---- the processor itself --------------------------------------------------------------------------


def test_bottom_k_removes_the_k_most_probable_for_the_first_n_steps_only():
    scores = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
    proc = BottomKLogitsProcessor(2, 2, start=1)
    for length in (1, 2):  # steps 0 and 1
        out = proc(torch.zeros((2, length), dtype=torch.long), scores.clone())
        assert torch.isinf(out).tolist() == [[False, True, False, True, False], [True, True, False, False, False]]
    assert torch.equal(proc(torch.zeros((2, 3), dtype=torch.long), scores.clone()), scores)  # step 2: unchanged
    assert torch.equal(BottomKLogitsProcessor(0, 5)(torch.zeros((2, 1), dtype=torch.long), scores.clone()), scores)


def test_bottom_k_renormalises_the_rest_exactly_as_eq_2():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    p = torch.softmax(logits, -1)[0]
    out = torch.softmax(BottomKLogitsProcessor(2, 1)(torch.zeros((1, 1), dtype=torch.long), logits), -1)[0]
    rest = p[2:] / p[2:].sum()
    assert out[:2].tolist() == [0.0, 0.0]
    assert torch.allclose(out[2:], rest, atol=1e-7)


def test_a_row_with_no_more_than_k_allowed_tokens_is_left_alone():
    forced = torch.tensor([[float("-inf"), 1.0, float("-inf")], [0.0, 1.0, 2.0]])
    out = BottomKLogitsProcessor(1, 1)(torch.zeros((2, 1), dtype=torch.long), forced.clone())
    assert torch.equal(out[0], forced[0])
    assert torch.isinf(out[1]).tolist() == [False, False, True]


# ---- through generate on a tiny seq2seq model ------------------------------------------------------


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    from transformers import AutoTokenizer, MarianMTModel

    path = tiny_marian_dir(tmp_path_factory)
    torch.set_num_threads(1)
    return path, MarianMTModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _first_step_logprobs(model, tok, texts):
    enc = tok(texts, return_tensors="pt", padding=True)
    start = torch.full((len(texts), 1), model.config.decoder_start_token_id)
    with torch.inference_mode():
        return torch.log_softmax(model(**enc, decoder_input_ids=start).logits[:, -1], -1)


def _generate(model, tok, texts, *, k, steps, top_k=0, top_p=1.0, seed=0, n=20):
    from transformers import LogitsProcessorList

    enc = tok(texts, return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    with torch.inference_mode():
        return model.generate(
            **enc,
            do_sample=True,
            num_beams=1,
            num_return_sequences=n,
            top_k=top_k,
            top_p=top_p,
            max_new_tokens=12,
            output_scores=True,
            return_dict_in_generate=True,
            logits_processor=LogitsProcessorList([BottomKLogitsProcessor(k, steps, start=1)]),
        )


def test_no_token_among_the_top_k_is_chosen_in_the_first_n_steps(marian):
    _, model, tok = marian
    top2 = _first_step_logprobs(model, tok, SRC).topk(2, -1).indices
    out = _generate(model, tok, SRC, k=2, steps=1, top_k=120, top_p=0.95, n=20)
    first = out.sequences[:, 1].view(len(SRC), 20)
    for i in range(len(SRC)):
        assert not set(first[i].tolist()) & set(top2[i].tolist())
    # without bottom-k the tiny model picks its top token almost always
    plain = _generate(model, tok, SRC, k=0, steps=1, top_k=120, top_p=0.95, n=20).sequences[:, 1].view(len(SRC), 20)
    assert sum(int(t in top2[i]) for i in range(len(SRC)) for t in plain[i].tolist()) > 0.9 * 20 * len(SRC)


def test_after_step_n_the_distribution_is_plain_top_k_top_p(marian):
    """The scores generate sampled from at every step ≥ N equal HF's own top-k/top-p warpers applied to the
    model's logits for the same prefix; at steps < N they equal those warpers over the masked logits."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    _, model, tok = marian
    out = _generate(model, tok, SRC[:4], k=2, steps=2, top_k=5, top_p=0.9, n=3)
    enc = tok(SRC[:4], return_tensors="pt", padding=True)
    enc = {k: v.repeat_interleave(3, 0) for k, v in enc.items()}
    warp = lambda ids, s: TopPLogitsWarper(0.9)(ids, TopKLogitsWarper(5)(ids, s))  # noqa: E731
    for step, sampled_from in enumerate(out.scores):
        prefix = out.sequences[:, : step + 1]
        with torch.inference_mode():
            logits = torch.log_softmax(model(**enc, decoder_input_ids=prefix).logits[:, -1], -1)
        if step < 2:
            logits = BottomKLogitsProcessor(2, 2, start=1)(prefix, logits)
        expected = warp(prefix, logits)
        assert torch.equal(torch.isinf(expected), torch.isinf(sampled_from)), step
        finite = torch.isfinite(expected)
        assert torch.allclose(torch.softmax(expected, -1)[finite], torch.softmax(sampled_from, -1)[finite], atol=1e-5)


def test_with_k_zero_generation_is_plain_sampling(marian):
    _, model, tok = marian
    enc = tok(SRC, return_tensors="pt", padding=True)
    torch.manual_seed(5)
    with torch.inference_mode():
        plain = model.generate(**enc, do_sample=True, num_return_sequences=4, top_k=120, top_p=0.95, max_new_tokens=12)
    ours = _generate(model, tok, SRC, k=0, steps=1, top_k=120, top_p=0.95, seed=5, n=4).sequences
    assert torch.equal(plain, ours)


def test_hf_paraphraser_seq2seq_bags_are_seeded_and_in_input_order(marian):
    path, model, tok = marian
    para = HFParaphraser.load(path, device="cpu", threads=1)
    easy, hard = pcc_samplers()
    out = para.generate(SRC, [(easy, 6), (hard, 3)])
    assert [len(b) for b in out[TOP_K_TOP_P]] == [6] * len(SRC) and [len(b) for b in out[BOTTOM_K]] == [3] * len(SRC)
    assert para.generate(SRC, [(easy, 6), (hard, 3)]) == out
    top2 = _first_step_logprobs(model, tok, SRC).topk(2, -1).indices

    def top2_first(bags):  # the share of candidates whose first word is one of the model's top 2 first tokens
        firsts = [(i, tok(c, add_special_tokens=False)["input_ids"][:1]) for i, bag in enumerate(bags) for c in bag]
        return sum(bool(f) and f[0] in top2[i].tolist() for i, f in firsts) / len(firsts)

    # another batching (reversed input, small batches); decoding drops a special first token (<unk>), so the
    # first *word* can come from step 2: compare shares rather than demand zero
    done: list[int] = []
    assert para.generate(SRC, [(easy, 6), (hard, 3)], progress=done.append) == out  # reporting changes nothing
    assert done == [len(SRC), 2 * len(SRC)]  # texts done after each batch (one per sampler here), sampler by sampler
    done.clear()
    para.generate(SRC, [(easy, 6)], max_tokens=60, progress=done.append)
    assert len(done) > 2 and done == sorted(done) and done[-1] == len(SRC)

    class Stop(Exception):
        pass

    def stop_after_first_batch(n: int) -> None:
        raise Stop(n)

    with pytest.raises(Stop) as stopped:  # a stop requested (tasks.runtime.progress) ends it between batches
        para.generate(SRC, [(easy, 6)], max_tokens=60, progress=stop_after_first_batch)
    assert 0 < stopped.value.args[0] < len(SRC)
    hard_share = top2_first(para.generate(SRC[::-1], [(hard, 6)], max_tokens=40)[BOTTOM_K][::-1])
    easy_share = top2_first(out[TOP_K_TOP_P])
    assert hard_share < 0.2 and easy_share > 0.8, (hard_share, easy_share)


# ---- a causal LM -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = word_level_tokenizer()
    tok.bos_token = tok.eos_token
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_positions=64,
            n_embd=32,
            n_layer=1,
            n_head=2,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=tok.pad_token_id,
        )
    )
    out = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_hf_paraphraser_causal_lm_continues_the_prompt_without_echoing_it(gpt2_dir):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    para = HFParaphraser.load(gpt2_dir, device="cpu", threads=1, prompt="{text} ka")
    assert not para.encoder_decoder
    out = para.generate(
        SRC[:5], [(Sampler(BOTTOM_K, top_k=0, top_p=1.0, bottom_k=3, bottom_k_steps=1), 4)], max_len_a=0, max_len_b=3
    )[BOTTOM_K]
    assert [len(b) for b in out] == [4] * 5
    model, tok = GPT2LMHeadModel.from_pretrained(gpt2_dir).eval(), AutoTokenizer.from_pretrained(gpt2_dir)
    for text, bag in zip(SRC[:5], out):
        with torch.inference_mode():
            top3 = model(**tok(text + " ka", return_tensors="pt")).logits[0, -1].topk(3).indices.tolist()
        for cand in bag:  # the continuation only, and its first token is never one of the top 3
            ids = tok(cand, add_special_tokens=False)["input_ids"] if cand else []
            assert not ids or ids[0] not in top3


def test_prompt_without_placeholder_is_refused(gpt2_dir):
    with pytest.raises(ModelError, match="placeholder"):
        HFParaphraser.load(gpt2_dir, prompt="paraphrase:")


# ---- round trip through the NMT backends -----------------------------------------------------------


def test_round_trip_pivots_once_and_samples_back_with_bottom_k(marian, tmp_path):
    """Forward and backward are the same tiny Marian here (ka→AL, and AL is unknown to it): what is checked is
    the plumbing — one pivot per sentence, n samples per sampler, bottom-k reaching the return decoder."""
    path, model, tok = marian
    nmt = load_model(path, threads=1)
    calls = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def translate(self, src, options=_DEFAULT_OPTIONS, *, max_tokens=4096, progress=None):
            calls.append((len(src), options))
            return self.inner.translate(src, options, max_tokens=max_tokens, progress=progress)

    rt = RoundTripParaphraser(Counting(nmt), Counting(nmt), pivot_beam=2)
    easy, hard = pcc_samplers()
    done: list[int] = []
    out = rt.generate(SRC[:5], [(easy, 4), (hard, 2)], progress=done.append)
    assert done[-1] == 15 == 5 * (rt.pivot_passes + 2) and done == sorted(done)  # texts: pivots, then each sampler
    assert [(n, o.sampling, o.beam if not o.sampling else o.bottom_k) for n, o in calls] == [
        (5, False, 2),
        (20, True, 0),
        (10, True, 2),
    ]
    assert [len(b) for b in out[TOP_K_TOP_P]] == [4] * 5 and [len(b) for b in out[BOTTOM_K]] == [2] * 5


def test_ctranslate2_refuses_bottom_k_with_a_hint(marian, tmp_path):
    from models.nmt.ctranslate2 import convert_transformers

    ct2 = load_model(convert_transformers(marian[0], tmp_path / "ct2"), threads=1)
    with pytest.raises(ModelError, match="inference: native"):
        ct2.translate(SRC[:2], Sampler(BOTTOM_K, bottom_k=2, bottom_k_steps=1).decode_options())


# ---- bags and metrics ------------------------------------------------------------------------------


def test_candidate_bag_dedups_normalises_and_never_keeps_the_input():
    bag = candidate_bag("a b  c", {"top_k_top_p": ["a b c", " x  y", "x y", ""], "bottom_k": ["x y", "z", "a  b c"]})
    assert bag == [("top_k_top_p", 1, "x y"), ("bottom_k", 1, "z")]


def test_distinct_n_and_first_token_copying():
    texts = ["a b a b", "a b c"]
    assert distinct_n(texts, 1) == 3 / 7  # a b c out of 7 unigrams
    assert distinct_n(texts, 2) == 3 / 5  # (a b) (b a) (b c) out of 5 bigrams
    assert distinct_n(texts, 6) == 0.0
    assert copies_first_token(["I like it", "you go", ""], ["i love it", "we go", "x"]).tolist() == [True, False, False]
    assert np.asarray(copies_first_token([], [])).size == 0


def test_generate_candidates_stage_keeps_lineage_and_never_the_input(marian):
    """The stage over an Arrow shard with an HF generator: one row per distinct candidate, uid = md5(parent, text)."""
    import hashlib

    import pyarrow as pa

    from tasks.paraphrase.candidates import CANDIDATES, generate_candidates, sampling_plan

    rows = pa.table(
        {
            "uid": [f"u{i}" for i in range(4)],
            "text": SRC[:4],
            "label": ["a", "b", "a", "b"],
            "source": ["d"] * 4,
            "line": [1, 2, 3, 4],
        }
    )
    plan = sampling_plan(
        candidates=5,
        bottom_k_candidates=1,
        oversample=2.0,
        top_k=120,
        top_p=0.95,
        bottom_k=2,
        bottom_k_steps=1,
        temperature=1.0,
        seed=0,
    )
    out = generate_candidates(
        rows,
        generator={"kind": "hf", "prompt": "{text}"},
        plan=[{"sampler": s.__dict__, "n": n} for s, n in plan],
        generator_fingerprint="gen",
        max_tokens=4096,
        model_path=str(marian[0]),
        device="cpu",
        threads=1,
    )
    assert out.schema == CANDIDATES and out.num_rows > 0
    got = out.to_pylist()
    by_uid = {r["uid"]: r for r in rows.to_pylist()}
    for r in got:
        parent = by_uid[r["parent_uid"]]
        assert (r["label"], r["source"], r["line"], r["original"]) == (parent["label"], "d", parent["line"], parent["text"])
        assert r["text"] != parent["text"] and r["model"] == "gen"
        assert r["uid"] == hashlib.md5(f"{r['parent_uid']}\x1f{r['text']}".encode()).hexdigest()
    assert len({(r["parent_uid"], r["text"]) for r in got}) == len(got)
    assert {r["sampler"] for r in got} <= {TOP_K_TOP_P, BOTTOM_K}
    assert max(r["sample"] for r in got if r["sampler"] == TOP_K_TOP_P) < 8  # ceil(2 × 4) easy draws per sentence

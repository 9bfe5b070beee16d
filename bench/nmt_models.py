"""The tiny models the NMT benchmarks share, trained once into a work directory and reused.

- a fairseq transformer (the project's defaults: 2+2 layers, 64 dims) trained on the demo bitext, and
  its CTranslate2 conversion: fairseq vs CTranslate2 on the *same* model;
- a Marian model of the same size trained on the same pairs with transformers (a word-level tokenizer
  over the demo vocabulary), and its CTranslate2 conversion: transformers `generate` vs CTranslate2.

Not a benchmark itself.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from conf.schema import NMTTrainConf
from demo import iter_bitext

TRAIN_ROWS = 3000


def prepare(work: Path, threads: int) -> tuple[Path, Path, Path, Path]:
    """Offline, torch on ``threads``, and the four models (fairseq, its CT2, Marian, its CT2), ready."""
    from conf.offline import go_offline

    go_offline()
    import torch

    torch.set_num_threads(threads)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    fs, fs_ct2 = fairseq_models(work, threads=threads)
    hf, hf_ct2 = marian_models(work)
    print(f"models ready in {time.perf_counter() - t0:.0f} s; {threads} CPU threads")
    return fs, fs_ct2, hf, hf_ct2


def demo_pairs(n: int, *, split: str = "train", seed: int = 0) -> list[tuple[str, str]]:
    return [(s, t) for s, t, *_ in iter_bitext(n, seed=seed, split=split)]


def fairseq_models(work: Path, *, updates: int = 300, threads: int = 2) -> tuple[Path, Path]:
    """(fairseq model dir, its CTranslate2 conversion), trained on the demo bitext when missing."""
    from models.nmt.fairseq import FairseqModel, train_fairseq

    fs, ct2 = work / f"fairseq-{updates}", work / f"fairseq-{updates}-ct2"
    if not (fs / "augdag_nmt.json").is_file():
        pairs = demo_pairs(TRAIN_ROWS)
        t0 = time.perf_counter()
        train_fairseq(
            [s for s, _ in pairs],
            [t for _, t in pairs],
            fs,
            NMTTrainConf(max_update=updates),
            log=lambda line: None,
            threads=threads,
        )
        print(f"  trained fairseq ({updates} updates) in {time.perf_counter() - t0:.0f} s")
    if not (ct2 / "model.bin").is_file():
        FairseqModel.load(fs, device="cpu").to_ctranslate2(ct2)
    return fs, ct2


def marian_models(work: Path, *, steps: int = 600, seed: int = 0) -> tuple[Path, Path]:
    """(transformers Marian dir, its CTranslate2 conversion), trained on the demo bitext when missing."""
    from models.nmt.ctranslate2 import convert_transformers

    hf, ct2 = work / f"marian-{steps}", work / f"marian-{steps}-ct2"
    if not (hf / "config.json").is_file():
        t0 = time.perf_counter()
        _train_marian(hf, demo_pairs(TRAIN_ROWS), steps=steps, seed=seed)
        print(f"  trained Marian ({steps} steps) in {time.perf_counter() - t0:.0f} s")
    if not (ct2 / "model.bin").is_file():
        convert_transformers(hf, ct2)
    return hf, ct2


def _tokenizer(pairs: list[tuple[str, str]]):
    """Marian's conventions on the demo's words: </s> = 0, <unk> = 1, <pad> last, </s> appended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for s, t in pairs for w in (s + " " + t).split()})
    vocab = {"</s>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    vocab["<pad>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


def _train_marian(out: Path, pairs: list[tuple[str, str]], *, steps: int, seed: int) -> None:
    import torch
    from transformers import MarianConfig, MarianMTModel

    tokenizer = _tokenizer(pairs)
    pad, size = tokenizer.pad_token_id, len(tokenizer)
    config = MarianConfig(
        vocab_size=size,
        decoder_vocab_size=size,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=256,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    model.final_logits_bias[0, pad] = -1e4  # CTranslate2's Marian drops <pad> from the softmax
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    r = random.Random(seed)
    model.train()
    for _ in range(steps):
        batch = r.sample(pairs, 64)
        enc = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], padding=True, return_tensors="pt")
        enc["labels"][enc["labels"] == pad] = -100
        loss = model(**enc).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)

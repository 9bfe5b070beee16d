"""Paraphrase candidates (PCC §3.2.1): a bag of sampled paraphrases per sentence, easy and hard.

Easy candidates are top-k + top-p samples (Eq. 1; k = 120, p = 0.95). Hard ones come from bottom-k
(Eq. 2): for the first N decoding steps the k most probable tokens are removed and the rest
renormalised, then decoding goes on with top-k + top-p (defaults k = 2, N = 1). Removing the dominant
first tokens is what stops the generator from copying the input's opening (appendix F).

Two generators, one verb: ``generate(texts, plan) -> {sampler: [[candidate, ...] per text]}``.

- ``HFParaphraser``: any Hugging Face seq2seq or causal LM, by name or local path (a causal LM continues
  ``prompt``), sentences batched by length, on the GPU when there is one.
- ``RoundTripParaphraser``: source → pivot (beam search) → source (sampling) through the NMT backends
  of ``models.nmt``, bottom-k in the return decoder: paraphrases for anyone who has translation models.

Bottom-k in a transformers decoder is ``models.bottom_k.BottomKLogitsProcessor`` (it masks; transformers'
own temperature / top-k / top-p warpers do the rest); in fairseq's, ``models.nmt.fairseq_bottom_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conf.errors import ModelError
from models.banned import BannedTokensLogitsProcessor
from models.bottom_k import BottomKLogitsProcessor
from models.candidates import BOTTOM_K, TOP_K_TOP_P, Plan, Sampler, pcc_samplers  # noqa: F401 — re-exported
from models.nmt.base import (
    DecodeOptions,
    NMTModel,
    Progress,
    length_batches,
    pick_device,
)
from models.nmt.transformers import local_files
from models.runtime import loading, seeded, step_seed, torch_threads
from storage.artifacts import fingerprint, hash_inputs


class HFParaphraser:
    """A Hugging Face seq2seq or causal LM that samples paraphrases of ``prompt.format(text=...)``."""

    pivot_passes = 0  # passes over the texts before the plan's (progress counts them): none

    def __init__(self, model: Any, tokenizer: Any, *, path: str | Path, device: str, prompt: str):
        self.model, self.tokenizer, self.path, self.device, self.prompt = model, tokenizer, path, device, prompt
        self.encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        if not self.encoder_decoder:
            tokenizer.padding_side = "left"  # a causal LM continues the prompt: pad on the left
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def load(cls, name_or_path: str | Path, *, device: str = "auto", threads: int = 0, prompt: str = "{text}") -> HFParaphraser:
        """Load by local path or Hugging Face name (offline: the local cache), seq2seq or causal."""
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

        if "{text}" not in prompt:
            raise ModelError(f"paraphrase prompt {prompt!r} has no '{{text}}' placeholder")
        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        try:
            with loading():
                config = AutoConfig.from_pretrained(str(name_or_path))
                auto = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
                model = auto.from_pretrained(str(name_or_path))
                tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{name_or_path}: no seq2seq or causal transformers model found offline by this name "
                f"or path: {e}. Hint: a directory written by save_pretrained, or a model in the "
                "Hugging Face cache"
            ) from e
        return cls(model.to(device).eval(), tokenizer, path=name_or_path, device=device, prompt=prompt)

    def fingerprint(self) -> str:
        return fingerprint("hf-paraphraser", "1", {"prompt": self.prompt}, [hash_inputs([local_files(self.path)])])

    def generate(
        self,
        texts: Sequence[str],
        plan: Plan,
        *,
        max_tokens: int = 4096,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        banned: Sequence[Sequence[str]] | None = None,
        progress: Progress | None = None,
    ) -> dict[str, list[list[str]]]:
        """``n`` samples per text for each (sampler, n) of ``plan``, in input order; ``banned``: words per text
        that its samples must not start a token with (``models.banned``). Each sample is at most ``max_len_a`` ×
        its batch's longest input + ``max_len_b`` new tokens; ``progress(texts done)`` after every batch, counting
        ``len(texts)`` per (sampler, n) of the plan (it may raise to stop between batches)."""
        from models.banned import banned_token_ids

        prompts = [self.prompt.format(text=t) for t in texts]
        ids = self.tokenizer(prompts, truncation=True)["input_ids"]
        bans = [banned_token_ids(self.tokenizer, words) for words in banned] if banned is not None else None
        out = {}
        for k, (s, n) in enumerate(plan):
            step = None if progress is None else (lambda done, k=k: progress(k * len(ids) + done))
            out[s.name] = self._sample(ids, s, n, max_tokens, max_len_a, max_len_b, bans, step)
        return out

    def _sample(
        self,
        ids: list[list[int]],
        sampler: Sampler,
        n: int,
        max_tokens: int,
        a: float,
        b: int,
        bans: list[list[int]] | None = None,
        progress: Progress | None = None,
    ) -> list[list[str]]:
        import torch
        from transformers import LogitsProcessorList

        out: list[list[str]] = [[] for _ in ids]
        if n == 0:
            return out
        done = 0
        with torch.inference_mode():
            for k, batch in enumerate(length_batches([len(x) * n for x in ids], max_tokens=max_tokens)):
                rows = [ids[i] for i in batch]
                inputs = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.device)
                width = inputs["input_ids"].shape[1]
                start = 1 if self.encoder_decoder else width
                processors = LogitsProcessorList([BottomKLogitsProcessor(sampler.bottom_k, sampler.bottom_k_steps, start=start)])
                if bans is not None:
                    processors.append(BannedTokensLogitsProcessor([bans[i] for i in batch], n=n))
                with seeded(step_seed(sampler.seed, k)):  # torch's generator, owned one batch at a time
                    generated = self.model.generate(
                        **inputs,
                        do_sample=True,
                        num_beams=1,
                        num_return_sequences=n,
                        top_k=sampler.top_k,
                        top_p=sampler.top_p,
                        temperature=sampler.temperature,
                        logits_processor=processors,
                        max_new_tokens=int(a * max(map(len, rows)) + b),
                    )
                if not self.encoder_decoder:
                    generated = generated[:, width:]
                texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
                for j, i in enumerate(batch):
                    out[i] = [t.strip() for t in texts[j * n : (j + 1) * n]]
                done += len(batch)
                if progress is not None:
                    progress(done)
        return out


class RoundTripParaphraser:
    """Source → pivot with ``forward`` (beam search), pivot → source with ``backward`` (sampling, bottom-k
    in this return decoder). One pivot per sentence, shared by every sampler of the plan."""

    pivot_passes = 1  # the pivots' translation, before the plan's samplers

    def __init__(self, forward: NMTModel, backward: NMTModel, *, pivot_beam: int = 4):
        self.forward, self.backward, self.pivot_beam = forward, backward, pivot_beam

    def fingerprint(self) -> str:
        return fingerprint(
            "round-trip", "1", {"pivot_beam": self.pivot_beam}, [self.forward.fingerprint(), self.backward.fingerprint()]
        )

    def pivots(self, texts: Sequence[str], *, max_tokens: int = 4096, progress: Progress | None = None) -> list[str]:
        return self.forward.translate(list(texts), DecodeOptions(beam=self.pivot_beam), max_tokens=max_tokens, progress=progress)

    def generate(
        self,
        texts: Sequence[str],
        plan: Plan,
        *,
        max_tokens: int = 4096,
        pivots: Sequence[str] | None = None,
        progress: Progress | None = None,
    ) -> dict[str, list[list[str]]]:
        """As ``HFParaphraser.generate``; ``progress`` counts ``len(texts)`` for the pivots and as many per (sampler,
        n) of the plan. Both decoders bound their outputs as every NMT model does (models/nmt/base.py)."""
        if pivots is None:
            pivots = self.pivots(texts, max_tokens=max_tokens, progress=progress)
        out = {}
        for k, (sampler, n) in enumerate(plan):
            repeated = [p for p in pivots for _ in range(n)]
            offset = (k + 1) * len(pivots)
            step = None if progress is None else (lambda done, offset=offset, n=n: progress(offset + done // n))
            back = self.backward.translate(repeated, sampler.decode_options(), max_tokens=max_tokens, progress=step) if n else []
            out[sampler.name] = [back[i * n : (i + 1) * n] for i in range(len(pivots))]
        return out

    def generate_constrained(
        self,
        texts: Sequence[str],
        *,
        n: int,
        banned: Sequence[Sequence[str]],
        required: Sequence[Sequence[str]],
        max_tokens: int = 4096,
    ) -> list[list[str]]:
        """Up to ``n`` paraphrases per text under lexical constraints: the pivot by beam search, then the
        return decoder's ``n`` best (beam ``n``) without the ``banned`` words and, where ``required`` has
        words, with each of them (fairseq's lexically constrained beam search). Needs a native fairseq
        return model; the others have no per-sentence constraints here."""
        if not hasattr(self.backward, "translate_constrained"):
            raise ModelError(
                f"round trip: the return model {self.backward.fingerprint()[:12]} has no lexically "
                "constrained decoding (a native fairseq model has). Hint: paraphrase.generator.backward"
                ".inference: native with backend fairseq, or mt_paraphrase.decode: sample"
            )
        pivots = self.pivots(texts, max_tokens=max_tokens)
        return self.backward.translate_constrained(
            pivots, banned=banned, required=required, beam=n, nbest=n, max_tokens=max_tokens
        )

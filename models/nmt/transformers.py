"""The transformers backend: any Hugging Face seq2seq translation model (Marian, M2M100, NLLB, …).

Conventions are the tokenizer's: a source is ``tokenizer(text)`` (Marian appends ``</s>``; M2M100 and
NLLB put the source language token first), a target is ``tokenizer(text_target=text)``, which is also
the label sequence scored, EOS included (M2M100/NLLB: the target language token first). The decoder
starts from the model's ``decoder_start_token_id`` (Marian: ``<pad>``; M2M100/NLLB: ``</s>``), and
``translate`` forces the target language token as the first generated one where the tokenizer has one.

Loading is offline (``conf.offline``): a local directory, else a name already in the Hugging Face cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conf.errors import ModelError
from models.nmt.base import (
    DecodeOptions,
    NMTModel,
    Progress,
    check_pairs,
    length_batches,
    pick_device,
)
from models.runtime import loading, seeded, step_seed, torch_threads
from storage.artifacts import hash_inputs


def load_tokenizer(name_or_path: str | Path, *, src_lang: str | None = None, tgt_lang: str | None = None) -> Any:
    """``AutoTokenizer`` for a model, offline; ``src_lang``/``tgt_lang`` set the languages of M2M100/NLLB-style
    tokenizers (the ones saved with the tokenizer apply otherwise)."""
    from transformers import AutoTokenizer

    try:
        with loading():
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    except (OSError, ValueError) as e:
        raise ModelError(
            f"{name_or_path}: no Hugging Face tokenizer found, looked up offline (local directory, "
            f"else the Hugging Face cache): {e}. Hint: save the tokenizer with the model "
            "(tokenizer.save_pretrained) or copy a cached download here"
        ) from e
    for attr, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang is None:
            continue
        if not hasattr(tokenizer, attr):
            raise ModelError(
                f"{name_or_path}: {attr}={lang!r} given, but its tokenizer "
                f"({type(tokenizer).__name__}) has no languages. Hint: leave {attr} unset"
            )
        setattr(tokenizer, attr, lang)
    return tokenizer


def target_prefix(tokenizer: Any) -> list[int]:
    """The ids a target starts with before its text: ``[]`` for Marian, ``[tgt_lang token]`` for M2M100/NLLB
    (those of an empty target, up to its EOS)."""
    ids = tokenizer(text_target=[""])["input_ids"][0]
    eos = tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


def special_ids(tokenizer: Any) -> set[int]:
    """The ids that carry no text: the tokenizer's special tokens but ``<unk>``, which stands for some."""
    return set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}


def max_positions(config: Any) -> int | None:
    """The longest sequence the model's position embeddings cover (None: no such limit, e.g. T5)."""
    return getattr(config, "max_position_embeddings", None)


def scorable(src_ids: Sequence[int], tgt_ids: Sequence[int], special: set[int], limit: int | None) -> bool:
    """A pair is scored iff both sides have an id that is not ``special`` and both fit in ``limit`` positions."""
    if all(i in special for i in src_ids) or all(i in special for i in tgt_ids):
        return False
    return limit is None or max(len(src_ids), len(tgt_ids)) <= limit


def max_new_tokens(source_len: int, options: DecodeOptions, limit: int | None) -> int:
    """max_len_a · |source subwords| + max_len_b, at most ``limit`` (the model's positions)."""
    n = int(options.max_len_a * source_len + options.max_len_b)
    return max(1, min(n, limit) if limit is not None else n)


class TransformersModel(NMTModel):
    """A Hugging Face ``AutoModelForSeq2SeqLM`` with its tokenizer."""

    backend = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, path: str | Path, device: str):
        self.model, self.tokenizer, self.path, self.device = model, tokenizer, path, device
        self.max_positions = max_positions(model.config)
        self.prefix = target_prefix(tokenizer)
        self.special = special_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id

    @classmethod
    def load(
        cls,
        name_or_path: str | Path,
        *,
        device: str = "auto",
        threads: int = 0,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> TransformersModel:
        """Load a model by local path or by a name in the Hugging Face cache, never over the network.

        Args:
            name_or_path: a directory written by ``save_pretrained``, or a Hugging Face model name.
            device: auto, cpu or cuda (``pick_device``).
            threads: CPU threads for torch (0: every core this process may use).
            src_lang: source language of an M2M100/NLLB-style tokenizer (e.g. "en", "eng_Latn").
            tgt_lang: target language, which also becomes the forced first token of a translation.
        """
        from transformers import AutoModelForSeq2SeqLM

        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        try:
            with loading():
                model = AutoModelForSeq2SeqLM.from_pretrained(str(name_or_path))
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{name_or_path}: no seq2seq transformers model found, looked up offline by this "
                f"name or path (local directory, else the Hugging Face cache): {e}. Hint: pass a "
                "local directory written by save_pretrained, or download the model on a "
                "connected machine and copy its Hugging Face cache here"
            ) from e
        tokenizer = load_tokenizer(name_or_path, src_lang=src_lang, tgt_lang=tgt_lang)
        return cls(model.to(device).eval(), tokenizer, path=name_or_path, device=device)

    def fingerprint(self) -> str:
        return model_fingerprint(self.path, self.tokenizer)

    def score(self, src: Sequence[str], tgt: Sequence[str], *, max_tokens: int = 4096) -> list[np.ndarray | None]:
        """log p(y_t | y_<t, x) of every label token of ``tokenizer(text_target=tgt)``, EOS included.

        Returns one float32 array per pair, ``None`` for a pair with an empty side or one longer than the
        model's positions.
        """
        check_pairs(src, tgt)
        src_ids = self.tokenizer(list(src))["input_ids"]
        tgt_ids = self.tokenizer(text_target=list(tgt))["input_ids"]
        todo = [i for i in range(len(src_ids)) if scorable(src_ids[i], tgt_ids[i], self.special, self.max_positions)]
        out: list[np.ndarray | None] = [None] * len(src_ids)
        lengths = [max(len(src_ids[i]), len(tgt_ids[i])) for i in todo]
        for batch in length_batches(lengths, max_tokens=max_tokens):
            rows = [todo[j] for j in batch]
            for i, logprobs in zip(rows, self._score_batch([src_ids[i] for i in rows], [tgt_ids[i] for i in rows])):
                out[i] = logprobs
        return out

    def _score_batch(self, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[np.ndarray]:
        inputs = self._padded(src_ids, self.pad_id)
        labels = self._padded(tgt_ids, -100)["input_ids"]
        with torch.inference_mode():
            logits = self.model(**inputs, labels=labels).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            picked = logprobs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1).cpu().numpy()
        return [picked[row, : len(ids)].astype(np.float32) for row, ids in enumerate(tgt_ids)]

    def _padded(self, ids: list[list[int]], pad: int) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids`` and ``attention_mask`` on the model's device."""
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids], dtype=torch.long)
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids], dtype=torch.long)
        return {"input_ids": input_ids.to(self.device), "attention_mask": mask.to(self.device)}

    def translate(
        self,
        src: Sequence[str],
        options: DecodeOptions = DecodeOptions(),  # noqa: B008 (frozen)
        *,
        max_tokens: int = 4096,
        progress: Progress | None = None,
    ) -> list[str]:
        """``generate`` in length-sorted batches: beam search, or one seeded sample per sentence; at most
        ``max_new_tokens`` (max_len_a · longest source of the batch + max_len_b) new tokens each.

        Sources longer than the model's positions are truncated to them (EOS kept). ``progress`` hears the
        sentences done after each batch.
        """
        truncate = {"truncation": True, "max_length": self.max_positions} if self.max_positions else {}
        src_ids = self.tokenizer(list(src), **truncate)["input_ids"]
        out = [""] * len(src_ids)
        done = 0
        for k, batch in enumerate(length_batches([len(x) for x in src_ids], max_tokens=max_tokens)):
            ids = [src_ids[i] for i in batch]
            # sampling owns torch's generator one batch at a time, seeded by (seed, batch); beam search draws none
            with seeded(step_seed(options.seed, k)) if options.sampling else contextlib.nullcontext():
                texts = self._generate(ids, options)
            for i, text in zip(batch, texts):
                out[i] = text
            done += len(batch)
            if progress is not None:
                progress(done)
        return out

    def _generate(self, ids: list[list[int]], options: DecodeOptions) -> list[str]:
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens(max(map(len, ids)), options, self.max_positions)}
        if options.sampling:
            kwargs.update(do_sample=True, num_beams=1, top_k=options.topk, top_p=options.topp, temperature=options.temperature)
            if options.bottom_k and options.bottom_k_steps:
                from transformers import LogitsProcessorList

                from models.bottom_k import BottomKLogitsProcessor

                start = 1 + len(self.prefix)  # the decoder start token and a forced language token come first
                kwargs["logits_processor"] = LogitsProcessorList(
                    [BottomKLogitsProcessor(options.bottom_k, options.bottom_k_steps, start=start)]
                )
        else:
            kwargs.update(do_sample=False, num_beams=options.beam, length_penalty=options.lenpen)
        if self.prefix:
            if len(self.prefix) > 1:
                raise ModelError(
                    f"{self.path}: targets start with {len(self.prefix)} tokens "
                    f"{self.prefix}; only a single forced first token is supported"
                )
            kwargs["forced_bos_token_id"] = self.prefix[0]
        with torch.inference_mode():
            generated = self.model.generate(**self._padded(ids, self.pad_id), **kwargs)
        return self.tokenizer.batch_decode(generated, skip_special_tokens=True)


def model_fingerprint(name_or_path: str | Path, tokenizer: Any) -> str:
    """The hash of a model's files (a cached download's snapshot for a name), with its tokenizer's languages."""
    digest = hash_inputs([local_files(name_or_path)])
    langs = [getattr(tokenizer, a, None) for a in ("src_lang", "tgt_lang")]
    return digest if langs == [None, None] else f"{digest}-{langs[0]}-{langs[1]}"


def local_files(name_or_path: str | Path) -> Path:
    """The directory holding a model's files: the path itself, else its snapshot in the Hugging Face cache."""
    path = Path(name_or_path)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name_or_path), local_files_only=True))
    except Exception as e:  # huggingface_hub raises several kinds for a name it does not have
        raise ModelError(f"{name_or_path}: not a local path and not in the Hugging Face cache ({e})") from e

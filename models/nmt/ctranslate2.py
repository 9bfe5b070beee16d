"""The CTranslate2 backend: fast inference of a converted transformers or fairseq model.

CTranslate2 works on tokens; where they come from is the model card's business (``augdag_nmt.json``):

- ``card.subwords`` names a SentencePiece model (a fairseq conversion): sources and targets are its
  pieces, and CTranslate2 itself appends ``</s>`` to the source (``add_source_eos`` in its config.json).
- otherwise a Hugging Face tokenizer saved in the directory (``convert_transformers``): a source is
  ``tokenizer(text)`` as tokens, specials included (Marian: ``… </s>``; M2M100/NLLB: ``__en__ … </s>``),
  a target is ``tokenizer(text_target=text)`` without its final ``</s>``, and ``translate`` starts every
  hypothesis with the target's prefix (M2M100/NLLB: the target language token; Marian: none).

Either way CTranslate2 starts the decoder with the model's start token and scores the target's EOS,
so ``score`` has one log-probability per label token, like the transformers backend.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.nmt.base import (
    DecodeOptions,
    ModelCard,
    NMTModel,
    Progress,
    check_pairs,
    cpu_threads,
    length_batches,
    pick_device,
)
from models.runtime import global_state, loading

DEFAULT_MAX_POSITIONS = 1024  # CTranslate2's default max_input_length, for a model whose card has none


class PieceCodec:
    """SentencePiece pieces on both sides; CTranslate2 adds the source's special tokens itself."""

    def __init__(self, model_file: Path):
        from models.nmt.subwords import load_sentencepiece

        self.sp = load_sentencepiece(str(model_file))
        self.prefix: list[str] = []

    def source(self, texts: Sequence[str], max_len: int | None = None) -> list[list[str]]:
        pieces = self.sp.encode(texts)
        return pieces if max_len is None else [p[:max_len] for p in pieces]

    def target(self, texts: Sequence[str]) -> list[list[str]]:
        return self.sp.encode(texts)

    def has_text(self, tokens: Sequence[str]) -> bool:
        return len(tokens) > 0

    def decode(self, hypotheses: Sequence[Sequence[str]]) -> list[str]:
        return self.sp.decode(hypotheses)


class TokenizerCodec:
    """The tokens of a Hugging Face tokenizer, with its special tokens, as the source model saw them."""

    def __init__(self, tokenizer: Any):
        from models.nmt.transformers import special_ids, target_prefix

        self.tokenizer = tokenizer
        self.prefix = tokenizer.convert_ids_to_tokens(target_prefix(tokenizer))
        self.special = set(tokenizer.convert_ids_to_tokens(sorted(special_ids(tokenizer))))

    def source(self, texts: Sequence[str], max_len: int | None = None) -> list[list[str]]:
        truncate = {"truncation": True, "max_length": max_len} if max_len is not None else {}
        return self._tokens(self.tokenizer(list(texts), **truncate)["input_ids"])

    def target(self, texts: Sequence[str]) -> list[list[str]]:
        """The label tokens without their final EOS, which CTranslate2 appends (and scores) itself."""
        eos = self.tokenizer.eos_token
        tokens = self._tokens(self.tokenizer(text_target=list(texts))["input_ids"])
        return [t[:-1] if t and t[-1] == eos else t for t in tokens]

    def _tokens(self, ids: list[list[int]]) -> list[list[str]]:
        return [self.tokenizer.convert_ids_to_tokens(x) for x in ids]

    def has_text(self, tokens: Sequence[str]) -> bool:
        return any(t not in self.special for t in tokens)

    def decode(self, hypotheses: Sequence[Sequence[str]]) -> list[str]:
        ids = [self.tokenizer.convert_tokens_to_ids(list(h)) for h in hypotheses]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)


def load_codec(
    path: Path, card: ModelCard | None, *, src_lang: str | None = None, tgt_lang: str | None = None
) -> PieceCodec | TokenizerCodec:
    """The card's SentencePiece model, else the Hugging Face tokenizer saved in ``path``."""
    if card is not None and card.subwords:
        if src_lang or tgt_lang:
            raise ModelError(
                f"{path}: src_lang/tgt_lang apply to a Hugging Face tokenizer, but this model uses "
                f"the SentencePiece model {card.subwords}. Hint: leave them unset"
            )
        return PieceCodec(path / card.subwords)
    from models.nmt.transformers import load_tokenizer

    return TokenizerCodec(load_tokenizer(path, src_lang=src_lang, tgt_lang=tgt_lang))


def ct2_device(device: str) -> str:
    """``pick_device``, with CTranslate2's own view of CUDA: "auto" falls back to the CPU where it has none."""
    import ctranslate2

    picked = pick_device(device)
    if picked == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        if device == "auto":
            return "cpu"
        raise ModelError("device 'cuda' was asked for, but this CTranslate2 build sees no GPU. Hint: device: auto")
    return picked


def source_specials(path: Path) -> int:
    """How many tokens CTranslate2 adds to every source (``add_source_bos``/``add_source_eos``, fairseq: 1)."""
    config = path / "config.json"
    if not config.is_file():
        return 0
    conf = json.loads(config.read_text())
    return int(bool(conf.get("add_source_bos"))) + int(bool(conf.get("add_source_eos")))


class CT2Model(NMTModel):
    """A CTranslate2 ``Translator`` and the codec that turns text into its tokens and back."""

    backend = "ctranslate2"

    def __init__(
        self,
        codec: PieceCodec | TokenizerCodec,
        *,
        path: Path,
        device: str,
        threads: int = 0,
        compute_type: str = "default",
        max_positions: int = DEFAULT_MAX_POSITIONS,
        source_extra: int = 0,
    ):
        self.codec, self.path, self.device = codec, path, device
        self.threads, self.compute_type = threads, compute_type
        self.max_positions, self.source_extra = max_positions, source_extra
        self.translator = self.open_translator()

    def open_translator(self) -> Any:
        """A new ``ctranslate2.Translator`` of this model (new worker threads, so new random generators)."""
        import ctranslate2

        kwargs = cpu_workers(self.threads) if self.device == "cpu" else {}
        try:
            with loading():
                return ctranslate2.Translator(str(self.path), device=self.device, compute_type=self.compute_type, **kwargs)
        except (RuntimeError, ValueError) as e:
            raise ModelError(
                f"{self.path}: CTranslate2 could not load the model on {self.device} with compute_type={self.compute_type!r}: {e}"
            ) from e

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        threads: int = 0,
        compute_type: str = "default",
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> CT2Model:
        """Load a CTranslate2 model directory (``model.bin``) with its subwords.

        Args:
            path: the directory (``convert_transformers``, ``FairseqModel.to_ctranslate2`` or ct2-*-converter).
            device: auto, cpu or cuda.
            threads: CPU threads of the translator (0: every core this process may use).
            compute_type: CTranslate2's compute type: default (as converted), auto, int8, float16, float32, …
            src_lang: source language of an M2M100/NLLB-style tokenizer saved in the directory.
            tgt_lang: its target language, the prefix of every translation.
        """
        path = Path(path)
        if not (path / "model.bin").is_file():
            raise ModelError(
                f"{path}: no CTranslate2 model.bin. Hint: convert the model first "
                "(models.nmt.ctranslate2.convert_transformers or FairseqModel.to_ctranslate2)"
            )
        card = ModelCard.read(path)
        codec = load_codec(path, card, src_lang=src_lang, tgt_lang=tgt_lang)
        limit = (card.meta.get("max_positions") if card else None) or DEFAULT_MAX_POSITIONS
        return cls(
            codec,
            path=path,
            device=ct2_device(device),
            threads=threads,
            compute_type=compute_type,
            max_positions=int(limit),
            source_extra=source_specials(path),
        )

    def score(self, src: Sequence[str], tgt: Sequence[str], *, max_tokens: int = 4096) -> list[np.ndarray | None]:
        """log p(y_t | y_<t, x) of every target token and the EOS, from ``score_batch``.

        Returns one float32 array per pair, ``None`` for a pair with an empty side or one longer than the
        model's positions.
        """
        check_pairs(src, tgt)
        src_tok, tgt_tok = self.codec.source(src), self.codec.target(tgt)
        todo = [i for i in range(len(src_tok)) if self._scorable(src_tok[i], tgt_tok[i])]
        out: list[np.ndarray | None] = [None] * len(src_tok)
        results = self.translator.score_batch(
            [src_tok[i] for i in todo],
            [tgt_tok[i] for i in todo],
            max_batch_size=max_tokens,
            batch_type="tokens",
            max_input_length=0,
        )
        for i, result in zip(todo, results):
            out[i] = np.asarray(result.log_probs, dtype=np.float32)
        return out

    def _scorable(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> bool:
        if not (self.codec.has_text(src_tokens) and self.codec.has_text(tgt_tokens)):
            return False
        return max(len(src_tokens) + self.source_extra, len(tgt_tokens) + 1) <= self.max_positions

    def translate(
        self,
        src: Sequence[str],
        options: DecodeOptions = DecodeOptions(),  # noqa: B008 (frozen)
        *,
        max_tokens: int = 4096,
        progress: Progress | None = None,
    ) -> list[str]:
        """``translate_batch`` over length-sorted chunks: beam search, or one seeded sample per sentence.

        Sources longer than the model's positions are truncated to them. A chunk holds the batches of every
        parallel worker (``max_tokens`` source tokens each), and its ``max_decoding_length`` is max_len_a ·
        its longest source + max_len_b: one long sentence no longer lets every other run that far (an
        upper-cased test set ran to the longest source's bound). ``progress`` hears the sentences done after
        each chunk, where a stop can happen: CTranslate2 cannot be interrupted inside a call.

        CTranslate2 seeds a worker thread's random generator once, when it first samples (``set_random_seed``
        does not reseed it), so sampling opens a fresh translator after setting the seed: reproducible, at
        the cost of a reload.
        """
        import ctranslate2

        if options.bottom_k and options.bottom_k_steps:
            raise ModelError(
                f"{self.path}: bottom-k sampling needs the model's per-step distribution, which "
                "CTranslate2's Python API does not expose. Hint: decode this model with "
                "`inference: native` (fairseq or transformers)"
            )
        tokens = self.codec.source(src, max_len=self.max_positions - self.source_extra)
        out = [""] * len(tokens)
        todo = [i for i, t in enumerate(tokens) if t]
        if not todo:
            return out
        if options.sampling:  # the seed is process-wide and read when a worker first samples: own it
            with global_state():
                ctranslate2.set_random_seed(options.seed)
                self._translate_chunks(self.open_translator(), tokens, todo, options, max_tokens, out, progress)
        else:
            self._translate_chunks(self.translator, tokens, todo, options, max_tokens, out, progress)
        return out

    def _translate_chunks(
        self,
        translator: Any,
        tokens: list[list[str]],
        todo: list[int],
        options: DecodeOptions,
        max_tokens: int,
        out: list[str],
        progress: Progress | None,
    ) -> None:
        """``out[i]`` for each ``i`` of ``todo``, a length-sorted chunk per ``translate_batch`` call."""
        workers = max(1, int(getattr(translator, "num_translators", 1)))
        done = len(out) - len(todo)
        for chunk in length_batches([len(tokens[i]) + self.source_extra for i in todo], max_tokens=max_tokens * workers):
            rows = [todo[j] for j in chunk]
            for i, text in zip(
                rows, self.codec.decode(self._translate_batch(translator, [tokens[i] for i in rows], options, max_tokens))
            ):
                out[i] = text
            done += len(rows)
            if progress is not None:
                progress(done)

    def _translate_batch(
        self, translator: Any, tokens: list[list[str]], options: DecodeOptions, max_tokens: int
    ) -> list[list[str]]:
        """One ``translate_batch`` call over ``tokens`` (one chunk): CTranslate2 sorts them by length into
        batches of ``max_tokens`` and runs the batches on its parallel workers (``cpu_workers``)."""
        from models.nmt.transformers import max_new_tokens

        longest = max(len(t) for t in tokens) + self.source_extra
        kwargs: dict[str, Any] = {
            # the decoder's start token takes a position too: a long source's bound stops one short of the positions
            "max_decoding_length": max_new_tokens(longest, options, self.max_positions - 1),
            "max_input_length": 0,
            "max_batch_size": max_tokens,
            "batch_type": "tokens",
        }
        if options.sampling:
            kwargs.update(
                beam_size=1, sampling_topk=options.topk, sampling_topp=options.topp, sampling_temperature=options.temperature
            )
        else:
            kwargs.update(beam_size=options.beam, length_penalty=options.lenpen)
        prefix = [list(self.codec.prefix) for _ in tokens] if self.codec.prefix else None
        results = translator.translate_batch(tokens, target_prefix=prefix, **kwargs)
        return [r.hypotheses[0] for r in results]


def cpu_workers(threads: int = 0) -> dict[str, int]:
    """CTranslate2's CPU threading for throughput: parallel batches (``inter_threads``, up to 2) before
    threads inside one batch; a small model's batch does not keep two cores busy (bench/translate.py:
    2 workers × 1 thread gave 1.4× one worker × 2 threads on the demo model)."""
    n = cpu_threads(threads)
    inter = min(2, n)
    return {"inter_threads": inter, "intra_threads": max(1, n // inter)}


def convert_transformers(
    model: str | Path, out_dir: Path, *, quantization: str | None = None, src_lang: str | None = None, tgt_lang: str | None = None
) -> Path:
    """Convert a transformers seq2seq model to a CTranslate2 directory that ``load_model`` opens.

    The directory gets ``model.bin`` and its vocabulary, the tokenizer (saved with its languages) and a
    card: ``ModelCard(backend="ctranslate2", converted_from="transformers", source_fingerprint=…)``, with
    the source's ``max_positions`` in ``meta``. Written under a temporary name and renamed when complete.

    Args:
        model: a local directory or a Hugging Face name in the local cache.
        out_dir: the new directory; it must not exist, or be empty.
        quantization: CTranslate2 weight quantization (int8, int8_float32, float16, …); None keeps float32.
        src_lang: source language to save with an M2M100/NLLB-style tokenizer.
        tgt_lang: target language to save with it.
    """
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoConfig

    from models.nmt.transformers import load_tokenizer, max_positions, model_fingerprint

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ModelError(f"{out_dir}: exists and is not empty; the converted model needs a new directory")
    tokenizer = load_tokenizer(model, src_lang=src_lang, tgt_lang=tgt_lang)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        TransformersConverter(str(model)).convert(str(tmp), quantization=quantization, force=True)
    except (ValueError, NotImplementedError, OSError, RuntimeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"{model}: CTranslate2 could not convert this transformers model: {e}") from e
    tokenizer.save_pretrained(tmp)
    meta = {"max_positions": max_positions(AutoConfig.from_pretrained(str(model))), "source": str(model)}
    ModelCard(
        backend="ctranslate2",
        subwords=None,
        converted_from="transformers",
        source_fingerprint=model_fingerprint(model, tokenizer),
        meta=meta,
    ).write(tmp)
    if out_dir.exists():
        out_dir.rmdir()
    tmp.rename(out_dir)
    return out_dir

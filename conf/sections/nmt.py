"""The NMT model sections: how a model is loaded or trained (fairseq), shared by every pipeline that
translates or scores (self-training's teacher, rejuvenation, train_nmt, the round-trip paraphraser)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from conf.base import ConfModel
from conf.sections.filters import LanguageIdConf, RepetitionConf


class NMTTrainConf(ConfModel):
    """fairseq-train for a model the pipeline trains itself. The defaults are a tiny transformer that learns
    the demo corpus in seconds on a CPU; a real run sets the thesis' sizes (transformer base, 6+6 layers)."""

    arch: str = "transformer"
    encoder_layers: int = Field(2, ge=1)
    decoder_layers: int = Field(2, ge=1)
    embed_dim: int = Field(64, ge=8)
    ffn_dim: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    lr: float = Field(3e-3, gt=0)
    warmup_updates: int = Field(30, ge=0)  # inverse-sqrt schedule after a linear warm-up (0: fixed lr)
    max_update: int = Field(300, ge=1)  # training steps (the demo bitext: BLEU ≈ 44 on its test set)
    max_tokens: int = Field(1024, ge=16)  # tokens per batch
    seed: int = 1
    vocab_size: int = Field(1000, ge=16)  # joint SentencePiece vocabulary (subwords inside the backend)
    extra_args: list[str] = []  # passed verbatim to fairseq-train


class NMTConf(ConfModel):
    """One NMT model: loaded from ``model`` (a local path, or a Hugging Face name for ``transformers``), or, when
    ``model`` is unset, trained with fairseq on the pipeline's own data (``train``)."""

    backend: Literal["fairseq", "transformers", "ctranslate2"] = "fairseq"
    model: str | None = None
    trusted: bool = False  # unpickle a fairseq checkpoint augdag did not train (it can run arbitrary code)
    inference: Literal["native", "ctranslate2"] = "native"  # ctranslate2: convert once, score/translate with it
    compute_type: str = "default"  # ctranslate2: default, float32, int8, int8_float16, ...
    src_lang: str | None = None  # multilingual transformers models (M2M100, NLLB): source language code
    tgt_lang: str | None = None  # ... and the target language, forced as the first token of a translation
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when present, else CPU threads
    threads: int = Field(0, ge=0)  # CPU threads; 0: every core
    max_tokens: int = Field(4096, ge=16)  # tokens per inference batch (batches are sorted by length)
    # a translation has at most max_len_a · |source subwords| + max_len_b tokens (fairseq's max_len_a/max_len_b,
    # CTranslate2's max_decoding_length, transformers' max_new_tokens): odd input stops there, not at the positions
    max_len_a: float = Field(1.5, ge=0)
    max_len_b: int = Field(10, ge=1)
    train: NMTTrainConf = NMTTrainConf()


# BLEU on the model's own training pairs (flows/pipelines/model_scores.py: 200 of them, an upper bound of what it does
# on new text). The demo's 300-update teacher scores 20-30 there; the 1,200-update teacher scored 0.36 and
# wrote "Wir, dass es es, dass es, dass es…". A model under 5 even on what it learnt from has not learnt to translate.
MIN_BLEU = 5.0


class GatedNMTConf(NMTConf):
    """An NMT model whose translations become training data (self-training's teacher, rejuvenation's models): after
    its validation score, a BLEU under ``min_bleu`` fails the run (``on_weak: fail``) or warns and goes on (``warn``);
    ``min_bleu: 0`` turns the gate off."""

    min_bleu: float = Field(MIN_BLEU, ge=0, le=100)  # sacrebleu BLEU on 200 of its training pairs (an upper bound)
    on_weak: Literal["fail", "warn"] = "fail"


class RepeatedNgramConf(ConfModel):
    """A degenerate translation: one n-gram of 1..``max_n`` words (case and punctuation aside) ``times`` or more times in
    a row, "dass es, dass es, dass es" (3 × "dass es")."""

    max_n: int = Field(4, ge=1, le=10)
    times: int = Field(3, ge=2)


def switch(value: Any) -> Any:
    """A check's section from YAML: ``false`` is off (None), ``true`` on with its defaults ({})."""
    return None if value is False else {} if value is True else value


class TeacherOutputChecks(ConfModel):
    """What a teacher's translations go through before the target LM (tasks/self_training/synthetic.py), each on the
    target side, each ``false`` to switch off: ``repetition`` (OpusFilter's RepetitionFilter, its defaults),
    ``repeated_ngram`` (degenerate output) and ``language_id`` (the bitext's tgt_lang, or the teacher's; skipped, and
    said so in the summary, when neither is known; ``min_chars``: shorter translations are not judged on language)."""

    repetition: Annotated[RepetitionConf | None, BeforeValidator(switch)] = RepetitionConf()
    repeated_ngram: Annotated[RepeatedNgramConf | None, BeforeValidator(switch)] = RepeatedNgramConf()
    language_id: Annotated[LanguageIdConf | None, BeforeValidator(switch)] = LanguageIdConf(min_chars=25)

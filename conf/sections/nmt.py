"""The NMT model sections: how a model is loaded or trained (fairseq), shared by every pipeline that
translates or scores (self-training's teacher, rejuvenation, train_nmt, the round-trip paraphraser)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from conf.base import ConfModel


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

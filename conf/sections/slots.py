"""The slot-filling sections: C2C-GenDA's cluster-to-cluster generation (c2c) and the tagger that measures
its effect (train_slot_tagger), with the paper's and the authors' code's defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from conf.base import ConfModel


class C2cModelConf(ConfModel):
    """The C2C generator (models/c2c): a causal transformer over (input cluster, rank token, target), with
    duplication-aware attention and the diverse-oriented regulariser."""

    init: str | None = None  # a local GPT-2-style checkpoint (path or cached HF name); None: from scratch
    layers: int = Field(2, ge=1)  # from scratch: the authors' un-pretrained variant has 2 layers
    d_model: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    lam: float = Field(0.01, ge=0)  # λ: h = h′ − λ·h̄′ (duplication-aware attention; the authors' 0.01)
    # γ of loss = NLL + γ·R_diverse, R averaged over its (i, j, t) terms. The authors' γ = 1 averages R over
    # every padded position (the prefix too), a far smaller weight; averaged over target terms, γ > 1/2 pays
    # the model to get shared tokens wrong (training diverges: NLL 43 at γ = 1 on the toy set), so 0.1
    gamma: float = Field(0.1, ge=0)
    epochs: int = Field(10, ge=1)  # the authors' 10
    lr: float | None = Field(None, gt=0)  # None: 6.25e-5 from a checkpoint (the authors'), 1e-3 from scratch
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)


class C2cConf(ConfModel):
    """C2C-GenDA: delexicalise, pair clusters (Alg. 1), train a generator per fold, generate from the held-out
    fold's input clusters (cross expansion), relexicalise."""

    dataset: str | None = None  # a slots dataset (default: the profile's only one)
    cluster_size: int = Field(5, ge=1)  # c: k = n // c clusters per frame (authors: 5 full, 3 medium, 2 small)
    max_outputs: int = Field(10, ge=1)  # M′: the output cluster's size cap (and the rank tokens)
    min_distance: int = Field(4, ge=0)  # furthest including stops when the best DS is below this
    folds: int = Field(5, ge=2)  # cross expansion (the authors' 5)
    n_outputs: int = Field(10, ge=1)  # generated per input cluster (ranks 0..n-1; the authors always 10)
    max_tokens: int = Field(40, ge=1)  # per generated utterance (the authors' 40)
    temperature: float = Field(1.0, gt=0)  # plain sampling (the authors' 1)
    fills: int = Field(1, ge=1)  # relexicalisations per generated utterance (the authors fill twice)
    seed: int = 42  # clusters, folds, sampling and relexicalisation (the authors' 42)
    model: C2cModelConf = C2cModelConf()
    parallel: int = Field(1, ge=1)  # folds whose generators train at once, each in a process of its own (a CPU
    # machine whose small generators leave cores idle: 2); the generators are the same either way


class SlotTaggerConf(ConfModel):
    """The slot tagger (models/tagger): a Bi-LSTM from scratch (the paper's baseline; random embeddings,
    GloVe is not available offline), optionally with a CRF, or a Hugging Face token-classification model."""

    kind: Literal["bilstm", "hf"] = "bilstm"
    model: str | None = None  # hf: a token-classification model or encoder (name or local path)
    crf: bool = False
    embedding_dim: int = Field(300, ge=1)
    hidden: int = Field(128, ge=1)  # per direction
    layers: int = Field(2, ge=1)
    dropout: float = Field(0.5, ge=0, lt=1)
    lr: float | None = Field(None, gt=0)  # None: 0.01 (Adam, bilstm), 5e-5 (AdamW, hf)
    batch_size: int = Field(128, ge=1)
    epochs: int = Field(100, ge=1)
    clip: float = Field(5.0, gt=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)


SlotArm = Literal["original", "original+c2c"]


class TrainSlotTaggerConf(ConfModel):
    """The consumer of C2C's data: a tagger per arm and seed, span F1 (conlleval) on a held-out set."""

    dataset: str | None = None  # the training slots dataset (default: c2c.dataset)
    dev: str | None = None  # a held-out slots dataset: the epoch with the best dev F1 is kept (else the last)
    test: str | None = None  # a held-out slots dataset: F1 in `evaluations`
    arms: list[SlotArm] = ["original", "original+c2c"]
    seeds: list[int] = [0]
    tagger: SlotTaggerConf = SlotTaggerConf()
    parallel: int = Field(1, ge=1)  # taggers (arms × seeds) that train at once, each in a process of its own (a CPU
    # machine whose small taggers leave cores idle: 2); the taggers are the same either way

    @field_validator("arms", "seeds")
    @classmethod
    def _distinct(cls, v: list) -> list:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"expected a non-empty list without repeats, found {v}")
        return v

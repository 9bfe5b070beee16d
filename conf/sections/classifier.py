"""The text-classification sections: the classifier itself, the curriculum/augmentation consumer
(train_classifier) and EPiDA's classifier-feedback augmentation (epida), with the papers' defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from conf.base import ConfModel

Augmentation = Literal["none", "eda", "epida", "curriculum"]


class ClassifierConf(ConfModel):
    """The downstream text classifier (models/classifier/)."""

    kind: Literal["builtin", "sentence_embedding", "hf"] = "builtin"  # builtin: hashed n-gram bag, CPU-sized
    model: str | None = None  # sentence_embedding: the frozen encoder; hf: a sequence-classification model
    lr: float | None = Field(None, gt=0)  # None: the kind's default
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)


class TrainClassifierConf(ConfModel):
    """The consumer of the augmented data: the curriculum (PCC Alg. 1, level by level) or, per
    ``augmentation``, the originals alone, with EDA candidates, or with EPiDA's selection (Eq. 14)."""

    dataset: str | None = None  # whose rows train (default: paraphrase.dataset)
    test: str | None = None  # a labeled dataset held out for accuracy and macro-F1
    # one or several: each is an arm, trained and evaluated per seed (mean ± sd in `evaluation_summary`)
    augmentation: list[Augmentation] = ["curriculum"]
    schedule: Literal["original", "none", "two_stage", "gradual", "cyclic", "inverse_cyclic"] = "cyclic"
    cycles: int = Field(2, ge=1)  # passes over levels 0..C (appendix A: twice)
    steps_per_level: int = Field(30, ge=1)
    epochs: int = Field(10, ge=1)  # none | eda | epida: passes over the originals (Eq. 12 / Eq. 14)
    batch_size: int = Field(16, ge=1)
    original_share: float = Field(0.2, ge=0, le=1)  # originals mixed into every augmented batch (appendix A)
    classifier: ClassifierConf = ClassifierConf()
    seed: int = 0
    seeds: list[int] = []  # several seeds (default: [seed]); each arm is trained once per seed

    @field_validator("augmentation", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("augmentation", "seeds")
    @classmethod
    def _distinct(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError(f"listed twice: {sorted({x for x in v if v.count(x) > 1})}")
        return v

    def seed_list(self) -> list[int]:
        return list(self.seeds) or [self.seed]


class EdaConf(ConfModel):
    """EDA (Wei & Zou 2019): sr, ri, rs, rd in turn, each changing max(1, ⌊alpha · words⌋) words."""

    alpha: float = Field(0.1, ge=0, le=1)  # the EDA paper's default α for every operation


class CweConf(ConfModel):
    """CWE (Kobayashi 2018): masked-LM substitution of max(1, ⌊alpha · words⌋) words."""

    model: str | None = None  # any Hugging Face masked LM (name or local path)
    alpha: float = Field(0.1, ge=0, le=1)
    temperature: float = Field(1.0, gt=0)
    top_k: int = Field(50, ge=0)  # 0: the whole vocabulary
    batch_size: int = Field(64, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)


class EpidaConf(ConfModel):
    """EPiDA (Alg. 1): K·m candidates per row from each DA algorithm, scored by the classifier's feedback
    (REM Eq. 7, CEM Eq. 10), the m best of Eq. 11 kept; one-time, or online every `every_epochs` epochs."""

    dataset: str | None = None  # a labeled dataset (default: train_classifier.dataset, else the only one)
    test: str | None = None  # a held-out labeled dataset: the feedback classifier's accuracy and macro-F1
    sources: list[Literal["eda", "cwe", "back_translation"]] = ["eda"]  # the DA algorithms T
    amplification: int = Field(3, ge=1)  # K (the paper's default)
    m: int = Field(3, ge=1)  # kept per row and algorithm (the paper's default)
    alpha: float = Field(0.5, ge=0, le=1)  # Eq. 11's weight of s_div
    mode: Literal["both", "rem_only", "cem_only"] = "both"  # Table 5's ablations
    normalise: bool = True  # min-max per row before Eq. 11
    online: bool = False  # Table 5's OA: regenerate and reselect every `every_epochs` epochs
    pretrain_epochs: int = Field(5, ge=0)  # Table 5's PT: epochs on the originals first (0: no pre-training)
    epochs: int = Field(6, ge=1)  # training on originals + selected (Eq. 14) after the pre-training
    every_epochs: int = Field(2, ge=1)  # online: a new round every so many epochs
    batch_size: int = Field(16, ge=1)
    eda: EdaConf = EdaConf()
    cwe: CweConf = CweConf()
    classifier: ClassifierConf = ClassifierConf()
    seed: int = 0

    @model_validator(mode="after")
    def _sources(self) -> EpidaConf:
        if not self.sources or len(set(self.sources)) != len(self.sources):
            raise ValueError(f"epida.sources: {self.sources}; expected distinct algorithms among eda, cwe, back_translation")
        if "cwe" in self.sources and self.cwe.model is None:
            raise ValueError("epida.cwe.model: source 'cwe' needs a masked LM (a Hugging Face name or local path)")
        return self

    def rounds(self) -> int:
        """Augmentation rounds: 1 (one-time), or ⌈epochs / every_epochs⌉ online."""
        return -(-self.epochs // self.every_epochs) if self.online else 1

    def round_epochs(self, r: int) -> int:
        """Epochs trained after round ``r``'s selection."""
        if not self.online:
            return self.epochs
        return min(self.every_epochs, self.epochs - r * self.every_epochs)

"""train_nmt's experiment arms: a training mix per arm (SQL over the catalog's views, copies per part),
optional continued training on another mix, the seeds, and the paired significance test against the baseline."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from conf.base import ConfModel
from conf.sections.nmt import NMTConf


class NoisedTest(ConfModel):
    """A held-out bitext evaluated with OpusTrainer's modifiers applied to every pair (issue 30):
    ``{dataset: test2016, modifiers: {UpperCase: 1.0}}`` (one modifier) or a list of them, applied in order. The
    reference changes only where the modifier is defined on both sides (casing, end punctuation), never for typos;
    a pair the draws leave unchanged stays in the set as it is. Its scores are registered under ``name``."""

    dataset: str
    modifiers: dict[str, Any] | list[dict[str, Any]]  # checked when the profile loads (tasks/robustness/spec.py)
    seed: int = 0  # the draws: (seed, the pair's uid, modifier), the same set every night
    name: str | None = None  # the test set's name in evaluations (default: <dataset>+<Modifier>[+<Modifier>...])

    def entries(self) -> list[dict[str, Any]]:
        """The modifiers as OpusTrainer's list."""
        return [self.modifiers] if isinstance(self.modifiers, dict) else list(self.modifiers)

    @property
    def label(self) -> str:
        return self.name or "+".join([self.dataset, *(str(next(iter(e), "")) for e in self.entries())])


def label_of(test: str | NoisedTest) -> str:
    """A ``tests`` entry's name in evaluations: the dataset, or a noised set's label."""
    return test if isinstance(test, str) else test.label


def check_copies(mix: dict[str, str], copies: dict[str, int]) -> None:
    """Every ``copies`` key names a mix entry (a typo would silently train on 1 copy)."""
    if unknown := sorted(set(copies) - set(mix)):
        raise ValueError(f"copies names {unknown}, not entries of the mix ({', '.join(mix) or 'none'})")


def check_seeds(seeds: list[int] | None) -> list[int] | None:
    if seeds is not None and len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds listed twice: {sorted({s for s in seeds if seeds.count(s) > 1})}")
    return seeds


class ContinueConf(ConfModel):
    """Continued training: fairseq-train from the arm's checkpoint (optimizer, lr schedule, data order and
    meters reset; the first model's subwords and dictionaries) on another mix with its own learning rate."""

    mix: dict[str, str] = Field(min_length=1)  # name -> SQL over the views returning (src, tgt)
    copies: dict[str, int] = {}  # name -> times its rows enter the data (default 1)
    lr: float = Field(1e-5, gt=0)  # a fixed lr: the paper continues with 1e-5 after training at 1e-4
    max_update: int | None = Field(None, ge=1)  # updates of the continued phase (None: the student's max_update)
    warmup_updates: int = Field(0, ge=0)  # 0: the lr from the first update (fixed schedule)

    @model_validator(mode="after")
    def _copies_name_entries(self) -> ContinueConf:
        check_copies(self.mix, self.copies)
        return self


class ArmConf(ConfModel):
    """One arm: a student trained on ``mix`` (each entry ``copies`` times), optionally continued on
    ``continue_on``, once per seed."""

    mix: dict[str, str] = Field(min_length=1)  # name -> SQL over the views returning (src, tgt)
    copies: dict[str, int] = {}  # name -> times its rows enter the training data (default 1), e.g. 10:1
    continue_on: ContinueConf | None = None
    seeds: list[int] | None = None  # None: train_nmt.seeds
    label: str | None = None  # its name in summaries and the report, e.g. "paraphrase 10:1 + CT" (default: the key)

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int] | None) -> list[int] | None:
        return check_seeds(v)

    @model_validator(mode="after")
    def _copies_name_entries(self) -> ArmConf:
        check_copies(self.mix, self.copies)
        return self


class SignificanceConf(ConfModel):
    """sacrebleu's paired tests of each arm against the baseline, on all seeds' outputs concatenated."""

    resamples: int = Field(1000, ge=1)  # paired bootstrap resamples (Koehn 2004; sacrebleu's default)
    ar_trials: int = Field(10000, ge=0)  # approximate randomisation trials (sacrebleu's default; 0: not run)
    seed: int = Field(12345, ge=1)  # SACREBLEU_SEED (sacrebleu's default); sacrebleu leaves a 0 unseeded


class TrainNMTConf(ConfModel):
    """The downstream students (train_nmt flow): named arms, each a training mix selected from the catalog with
    SQL (copies per part, optional continued training), one fairseq student per arm and seed, sacrebleu BLEU
    and chrF on every test set with sacrebleu's paired tests against the baseline arm, all registered in the
    catalog (`models`, `evaluations`). Without `experiments`, `mix` and `copies` are the one arm `mix`."""

    experiments: dict[str, ArmConf] = {}  # arm name -> mix, copies, continue_on, seeds, label
    baseline: str | None = None  # the arm every other is tested against (default: the first experiment)
    mix: dict[str, str] = {}  # without experiments: the arm `mix` (default: every bitext row but the test sets')
    copies: dict[str, int] = {}  # name -> times its rows enter the training data (default 1)
    seeds: list[int] | None = None  # the seeds of every arm that lists none (default: [student.train.seed])
    test: str | None = None  # a held-out bitext: the same as tests: [test]
    tests: list[str | NoisedTest] = []  # held-out bitexts, each one evaluated (default: the profile's only bitext);
    # an entry {dataset: X, modifiers: {UpperCase: 1.0}} evaluates X with OpusTrainer's modifiers applied
    significance: SignificanceConf = SignificanceConf()
    student: NMTConf = NMTConf()
    beam: int = Field(5, ge=1)
    lenpen: float = 1.0
    parallel_arms: int = Field(1, ge=1)  # arms whose students train at once, each in its own fairseq process (a CPU
    # machine whose tiny students leave cores idle: 2; one GPU: 1); the models are the same either way

    def test_datasets(self) -> list[str]:
        """The dataset of each ``tests`` entry (a noised set's: the one it noises)."""
        return [t if isinstance(t, str) else t.dataset for t in self.tests]

    @model_validator(mode="after")
    def _arms(self) -> TrainNMTConf:
        check_seeds(self.seeds)
        if self.test is not None and self.tests:
            raise ValueError("set `tests` (a list) or `test` (one), not both")
        labels = [label_of(t) for t in self.tests]
        if len(set(labels)) != len(labels):
            raise ValueError(f"tests: listed twice: {sorted({t for t in labels if labels.count(t) > 1})}")
        if self.experiments and (self.mix or self.copies):
            raise ValueError(
                "`mix`/`copies` are the one arm of a run without `experiments`; with `experiments`, "
                "give each arm its own `mix` and `copies`"
            )
        check_copies(self.mix or {"bitext": ""}, self.copies)
        for name in self.experiments:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"experiments: arm name {name!r}: use letters, digits, '_' and '-'")
        if self.experiments and self.baseline is not None and self.baseline not in self.experiments:
            raise ValueError(f"baseline: {self.baseline!r} is not an arm ({', '.join(self.arm_names())})")
        n = len(self.arm_seeds(self.baseline_arm()))
        if uneven := {a: s for a in self.arm_names() if len(s := self.arm_seeds(a)) != n}:
            raise ValueError(
                f"every arm needs as many seeds as the baseline {self.baseline_arm()!r} ({n}): the paired "
                f"test matches their outputs seed by seed; found {uneven}"
            )
        return self

    def arm_names(self) -> list[str]:
        return list(self.experiments) or ["mix"]

    def baseline_arm(self) -> str:
        """The arm the others are tested against: `baseline`, else the first (the one arm `mix` without experiments)."""
        return (self.baseline if self.experiments else None) or self.arm_names()[0]

    def arm_seeds(self, arm: str) -> list[int]:
        own = self.experiments[arm].seeds if arm in self.experiments else None
        return list(own or self.seeds or [self.student.train.seed])

    def arms(self, default_mix: dict[str, str]) -> dict[str, ArmConf]:
        """The arms, in order; without `experiments` the one arm `mix` (``default_mix`` when `mix` is unset)."""
        if self.experiments:
            return dict(self.experiments)
        return {"mix": ArmConf(mix=self.mix or default_mix, copies=self.copies)}

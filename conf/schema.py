"""The typed configuration: one frozen pydantic model per section, unknown keys refused.

Only ``conf.loader`` reads YAML; every other function receives the typed section it needs (the paper's defaults
beside their equation)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from conf.base import ConfModel
from conf.cache_path import CACHE_ENV, DEFAULT_CACHE, resolve_cache  # noqa: F401 — imported from here too
from conf.pipelines import check_enabled, known_pipeline
from conf.sections.classifier import ClassifierConf, EpidaConf, TrainClassifierConf  # noqa: F401 — part of the schema
from conf.sections.cleaning import CleanConf, DatasetClean, IngestConf, TokenFilter, check_filters  # noqa: F401
from conf.sections.decoding import DecodeErrors, Encodings, InputConf
from conf.sections.experiments import TrainNMTConf  # noqa: F401 — train_nmt's arms, part of the schema
from conf.sections.filters import LanguageCode
from conf.sections.heldout import HeldoutConf
from conf.sections.mt_paraphrase import MtParaphraseConf
from conf.sections.nmt import GatedNMTConf, NMTConf, NMTTrainConf, TeacherOutputChecks  # noqa: F401 — part of the schema
from conf.sections.orchestration import NightlyConf, OrchestrationConf, TaskRunnerConf
from conf.sections.robustness import RobustnessConf
from conf.sections.sentences import Language, SplitSentences
from conf.sections.slots import C2cConf, TrainSlotTaggerConf
from conf.sections.storage import InputLocation, StorageConf
from conf.sections.tokenizer import TokenizerConf

Kind = Literal["bitext", "mono", "labeled", "slots"]
Format = Literal["text", "tsv", "jsonl", "parquet", "hf"]


class DatasetConf(InputConf):
    """One input corpus. ``text`` is a single file of lines (``mono``) or a line-aligned pair (``bitext``)."""

    kind: Kind
    format: Format
    # a path on this machine or an object-store URI (s3://bucket/key; not an hf directory)
    path: InputLocation | None = None  # tsv / jsonl / parquet file, a mono text file, or an HF `save_to_disk` dir
    src: InputLocation | None = None  # bitext as two line-aligned text files
    tgt: InputLocation | None = None
    columns: list[str] | None = None  # tsv: the record fields in column order (default: the kind's fields)
    rename: dict[str, str] = {}  # jsonl / parquet / hf: record field -> name in the input
    header: bool = False  # tsv: the first line names the columns and is skipped
    split: str | None = None  # hf: the split of a DatasetDict
    encoding: Encodings = "utf-8"  # of text/tsv/jsonl (plain, .gz/.bz2/.xz/.zst by content), binary columns; or {src, tgt}
    on_decode_error: DecodeErrors = "reject"  # a line that does not decode: rejected, or U+FFFD kept; or {src, tgt}
    split_sentences: SplitSentences = False  # mono: a row per sentence of each line (tasks/ingest/sentences.py)
    language: Language = "en"  # ISO 639-1, of the sentence splitter and (given) of mono/labeled rows' filters
    src_lang: LanguageCode | None = None  # a bitext's languages (ISO 639-1), for language_id and character_score
    tgt_lang: LanguageCode | None = None
    clean: DatasetClean = None  # false: never deduplicated or filtered; {max_ratio: 3, ...}: ingest.clean's, replaced

    @model_validator(mode="after")
    def _paths_match_format(self) -> DatasetConf:
        pair = self.format == "text" and self.kind == "bitext"
        if pair and (self.src is None or self.tgt is None or self.path is not None):
            raise ValueError("a bitext in format 'text' needs `src` and `tgt` (two line-aligned files), not `path`")
        if not pair and (self.path is None or self.src is not None or self.tgt is not None):
            raise ValueError(f"format {self.format!r} for kind {self.kind!r} needs `path`, not `src`/`tgt`")
        if self.format == "text" and self.kind not in ("bitext", "mono"):
            raise ValueError(f"format 'text' holds bitext or mono, not {self.kind!r}; use tsv or jsonl")
        if self.format == "hf" and isinstance(self.path, str):
            raise ValueError("format 'hf' reads a `save_to_disk` directory on this machine, not an object-store URI")
        return self

    def files(self) -> list[Path | str]:
        """The input files (or directory) this dataset reads: paths, or object-store URIs."""
        return [p for p in (self.src, self.tgt, self.path) if p is not None]

    def paths(self) -> dict[str, Path | str]:
        """The set path fields: ``{"src": ..., "tgt": ...}`` or ``{"path": ...}``."""
        return {f: p for f in ("path", "src", "tgt") if (p := getattr(self, f)) is not None}

    def resolved(self, base: Path, fields: Sequence[str]) -> DatasetConf:
        """This dataset with the relative paths among ``fields`` made ``base / path``."""
        update = {f: base / p for f, p in self.paths().items() if f in fields and isinstance(p, Path) and not p.is_absolute()}
        return self.model_copy(update=update) if update else self


class AlignerConf(ConfModel):
    """fast_align (Dyer et al. 2013), as the thesis used it (ch. 6): IBM Model 2 with a diagonal prior."""

    iterations: int = Field(5, ge=2)  # EM iterations; the last one only decodes
    p0: float = Field(0.08, gt=0, lt=1)  # NULL alignment probability
    alpha: float = Field(0.01, gt=0)  # variational-Bayes Dirichlet prior of the translation table
    tension: float = Field(4.0, gt=0)  # starting diagonal tension λ, optimised in [0.1, 14]
    optimize_tension: bool = True


class LMConf(ConfModel):
    """KenLM n-gram language models (modified Kneser–Ney, lmplz)."""

    order: int = Field(5, ge=1, le=6)  # lmplz is built with KENLM_MAX_ORDER=6
    memory: str = "20%"  # lmplz -S


class SamplingConf(ConfModel):
    """Uncertainty-based sampling of monolingual data (thesis ch. 6, Eq. 6.3–6.7) and its baselines."""

    method: Literal["uncertainty", "random", "word_rarity", "srclm"] = "uncertainty"
    budget: int | None = Field(None, ge=1)  # N_s: sentences to draw over all monolingual datasets; if unset:
    budget_ratio: float = Field(0.2, gt=0, le=1)  # this share of the (cleaned) monolingual rows
    percentile_r: float = Field(90, gt=0, le=100)  # R: U_max is this percentile of the bitext uncertainties
    beta: float = Field(2.0, gt=0)  # β of Eq. 6.6
    seed: int = 0
    bins: int = Field(5, ge=1)  # equal-size uncertainty bins for the linguistic properties (Fig. 6.3)


class SyntheticFilterConf(TokenFilter, TeacherOutputChecks):
    """What the self-training pipeline drops from its synthetic pairs (ch. 6): duplicates, length, ratio
    (the `clean` stage's settings), repetition, repeated n-grams, language (TeacherOutputChecks), and the target
    LM's worst share."""

    lm_drop: float = Field(0.0, ge=0, lt=1)  # drop this share with the worst target-LM cross-entropy (0.2 in Table 6.3)


class SelfTrainingConf(ConfModel):
    """The self-training pipeline: which datasets play the bitext and the monolingual data, and how."""

    bitext: str | None = None  # a dataset of kind bitext (default: the profile's only one)
    mono: list[str] = []  # datasets of kind mono (default: all of them)
    lowercase: bool = False  # lowercase before aligning and scoring
    tokenizer: TokenizerConf = TokenizerConf()  # words for the aligner, lexicon and LMs (moses; the views keep the text)
    aligner: AlignerConf = AlignerConf()
    lm: LMConf = LMConf()
    sampling: SamplingConf = SamplingConf()
    filter: SyntheticFilterConf = SyntheticFilterConf()
    teacher: GatedNMTConf = GatedNMTConf()  # translates the sample (trained on the bitext when `model` is unset)
    beam: int = Field(5, ge=1)  # the teacher's beam
    lenpen: float = 1.0


class RejuvenationConf(ConfModel):
    """Data rejuvenation (thesis ch. 5): identify the inactive pairs, forward-translate their sources."""

    bitext: str | None = None  # a dataset of kind bitext (default: the profile's only one)
    identification: GatedNMTConf = GatedNMTConf()  # scores every pair (trained on the bitext when `model` is unset)
    rejuvenator: Literal["active", "identification"] = "active"  # train on the active pairs, or reuse
    rejuvenation: GatedNMTConf = GatedNMTConf()  # the rejuvenation model when `rejuvenator` is "active"
    inactive_ratio: float = Field(0.10, gt=0, lt=1)  # R: the share of lowest-probability pairs that are inactive
    direction: Literal["forward", "backward", "both"] = "forward"  # forward: new targets; backward: new sources
    beam: int = Field(4, ge=1)
    lenpen: float = 0.6
    bins: int = Field(10, ge=1)  # probability bins of the report (Fig. 5.2)


class GeneratorConf(ConfModel):
    """The paraphrase candidate generator (PCC §3.2.1): a Hugging Face model, or round-trip translation."""

    kind: Literal["round_trip", "hf"] = "round_trip"
    model: str | None = None  # hf: a seq2seq or causal LM, local path or Hugging Face name
    prompt: str = "{text}"  # hf: the model's input, e.g. "paraphrase: {text}"; a causal LM continues it
    bitext: str | None = None  # round_trip: trains the pivot models whose `model` is unset (default: the only bitext)
    forward: NMTConf = NMTConf()  # round_trip: source → pivot, beam search
    backward: NMTConf = NMTConf()  # round_trip: pivot → source, sampled (bottom-k needs `inference: native`)
    pivot_beam: int = Field(4, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # hf
    threads: int = Field(0, ge=0)  # hf
    max_tokens: int = Field(4096, ge=16)  # hf: prompt tokens × samples per batch


class NLIConf(ConfModel):
    """The mutual-implication classifier M of Eq. 3 (any NLI sequence-classification model)."""

    model: str | None = None  # local path or HF name; unset: no MI, Eq. 3 keeps candidates with G ≥ β only
    entailment_label: str | None = None  # the label name of entailment, when config.id2label does not say
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)
    max_tokens: int = Field(4096, ge=16)


class SimilarityConf(ConfModel):
    """The textual similarity G(x, x̄) of Eq. 3–4 (BLEURT in the paper)."""

    kind: Literal["chrf", "cross_encoder", "embedding"] = "chrf"  # chrF/100 needs no model
    model: str | None = None  # cross_encoder: a regression checkpoint; embedding: a sentence-transformers model
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)
    max_tokens: int = Field(4096, ge=16)


class ParaphraseConf(ConfModel):
    """PCC's curriculum-aware paraphrase generation (Alg. 2): candidates, Eq. 3 filter, Eq. 4 levels."""

    dataset: str | None = None  # a labeled (or mono) dataset (default: the profile's only labeled one)
    generator: GeneratorConf = GeneratorConf()
    top_k: int = Field(120, ge=0)  # Eq. 1: the easy candidates' top-k ...
    top_p: float = Field(0.95, gt=0, le=1)  # ... and top-p
    bottom_k: int = Field(2, ge=0)  # k of Eq. 2
    bottom_k_steps: int = Field(1, ge=0)  # N: the first N tokens are drawn without the top k
    temperature: float = Field(1.0, gt=0)
    candidates: int = Field(20, ge=1)  # |X|: paraphrases kept per sentence after filtering (appendix A)
    bottom_k_candidates: int = Field(4, ge=0)  # of which drawn with bottom-k (appendix A: 4; 0 = PCC w/o bottom-k)
    oversample: float = Field(2.0, ge=1.0)  # samples drawn per kept candidate, before dedup and filtering
    nli: NLIConf = NLIConf()
    similarity: SimilarityConf = SimilarityConf()
    beta: float = 0.5  # β of Eq. 3 (the authors' code), on G's scale
    levels: int = Field(5, ge=1)  # C of Eq. 4; originals are level 0
    shortfall: Literal["skip", "repeat"] = "repeat"  # fewer than `candidates` survive: rank those, or repeat them
    seed: int = 0

    @model_validator(mode="after")
    def _bottom_k_share(self) -> ParaphraseConf:
        if self.bottom_k_candidates > self.candidates:
            raise ValueError(
                f"paraphrase.bottom_k_candidates ({self.bottom_k_candidates}) exceeds paraphrase.candidates ({self.candidates})"
            )
        return self


class DemoConf(ConfModel):
    seed: int = 0
    bitext_rows: int = Field(3000, ge=100)
    mono_rows: int = Field(5000, ge=100)
    labeled_rows: int = Field(1200, ge=100)
    slots_rows: int = Field(1200, ge=100)
    test_rows: int = Field(300, ge=50)  # held-out bitext and labelled rows


class AugdagConf(ConfModel):
    cache: Path = DEFAULT_CACHE  # overridden by AUGDAG_CACHE, then by --cache
    shard_size: int = Field(100_000, ge=1)
    storage: StorageConf = StorageConf()  # artifacts on an object store (conf/sections/storage.py)
    task_runner: TaskRunnerConf = TaskRunnerConf()
    orchestration: OrchestrationConf = OrchestrationConf()
    datasets: dict[str, DatasetConf] = {}
    pipelines: list[Annotated[str, AfterValidator(known_pipeline)]] = ["ingest"]  # registered in flows/engine/registry.py
    ingest: IngestConf = IngestConf()
    heldout: HeldoutConf = HeldoutConf()  # no training input holds a held-out line (conf/sections/heldout.py)
    self_training: SelfTrainingConf = SelfTrainingConf()
    rejuvenation: RejuvenationConf = RejuvenationConf()
    train_nmt: TrainNMTConf = TrainNMTConf()
    paraphrase: ParaphraseConf = ParaphraseConf()
    train_classifier: TrainClassifierConf = TrainClassifierConf()
    epida: EpidaConf = EpidaConf()
    c2c: C2cConf = C2cConf()
    mt_paraphrase: MtParaphraseConf = MtParaphraseConf()
    robustness: RobustnessConf = RobustnessConf()
    train_slot_tagger: TrainSlotTaggerConf = TrainSlotTaggerConf()
    nightly: NightlyConf = NightlyConf()
    demo: DemoConf = DemoConf()

    @model_validator(mode="after")
    def _dataset_names(self) -> AugdagConf:
        for name in self.datasets:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"dataset name {name!r}: use letters, digits, '_' and '-'")
        check_enabled(self.pipelines, self)  # each enabled pipeline's check, from its registry entry
        check_filters(self)  # every cleaned dataset's filters have the languages they need
        for i, name in enumerate(self.heldout.allow_overlap):
            if name not in self.datasets:
                raise ValueError(f"heldout.allow_overlap[{i}]: no dataset {name!r}; expected one of {', '.join(self.datasets)}")
        return self

    def paraphrase_generator(self) -> None:
        """The paraphrase pipeline's datasets and generator: round trip needs a bitext (unless both models
        are given), hf a model."""
        self.paraphrase_dataset()
        if self.paraphrase.generator.kind == "round_trip":
            self.paraphrase_bitext()
        elif self.paraphrase.generator.model is None:
            raise ValueError("paraphrase.generator.model: kind 'hf' needs a model (local path or HF name)")

    def train_nmt_test(self) -> list[str]:
        """train_nmt's held-out test sets: `tests`, else [`test`], else the profile's only bitext."""
        section = self.train_nmt
        if section.tests:
            return [self.dataset_of_kind(t, "bitext", f"train_nmt.tests[{i}]") for i, t in enumerate(section.test_datasets())]
        return [self.dataset_of_kind(section.test, "bitext", "train_nmt.test")]

    def paraphrase_dataset(self) -> str:
        """The dataset PCC paraphrases: named (labeled or mono), else the profile's only labeled one."""
        name = self.paraphrase.dataset
        if name is not None and name in self.datasets and self.datasets[name].kind == "mono":
            return name
        return self.dataset_of_kind(name, "labeled", "paraphrase.dataset")

    def paraphrase_bitext(self) -> str | None:
        """The bitext that trains the round-trip models, when one of them is not configured."""
        g = self.paraphrase.generator
        if g.forward.model is not None and g.backward.model is not None:
            return None
        return self.dataset_of_kind(g.bitext, "bitext", "paraphrase.generator.bitext")

    def classifier_datasets(self) -> tuple[str, str]:
        """The curriculum's dataset and the held-out test set of train_classifier."""
        tc = self.train_classifier
        train = self.dataset_of_kind(tc.dataset or self.paraphrase.dataset, "labeled", "train_classifier.dataset")
        test = self.dataset_of_kind(tc.test, "labeled", "train_classifier.test")
        if test == train:
            raise ValueError(f"train_classifier.test: {test!r} is also the training dataset; hold out another one")
        return train, test

    def epida_datasets(self) -> tuple[str, str | None]:
        """EPiDA's labelled dataset and its optional held-out test set; back-translation's generator checked."""
        section = self.epida
        train = self.dataset_of_kind(section.dataset or self.train_classifier.dataset, "labeled", "epida.dataset")
        test = None if section.test is None else self.dataset_of_kind(section.test, "labeled", "epida.test")
        if test == train:
            raise ValueError(f"epida.test: {test!r} is also the augmented dataset; hold out another one")
        if "back_translation" in section.sources and self.paraphrase.generator.kind == "round_trip":
            self.paraphrase_bitext()
        return train, test

    def mt_paraphrase_bitext(self) -> str:
        """The bitext mt_paraphrase paraphrases; its paraphraser (paraphrase.generator) checked."""
        name = self.dataset_of_kind(self.mt_paraphrase.bitext, "bitext", "mt_paraphrase.bitext")
        g = self.paraphrase.generator
        if g.kind == "round_trip":
            self.paraphrase_bitext()
        elif g.model is None:
            raise ValueError("paraphrase.generator.model: kind 'hf' needs a model (local path or HF name)")
        if self.mt_paraphrase.decode == "constrained" and (
            g.kind != "round_trip" or g.backward.inference != "native" or g.backward.backend != "fairseq"
        ):
            raise ValueError(
                "mt_paraphrase.decode: 'constrained' needs a round trip whose return model is native "
                "fairseq (paraphrase.generator.backward); use decode: sample for other paraphrasers"
            )
        return name

    def c2c_dataset(self) -> str:
        return self.dataset_of_kind(self.c2c.dataset, "slots", "c2c.dataset")

    def slot_tagger_datasets(self) -> tuple[str, str | None, str]:
        """The tagger's training, dev (optional) and test slots datasets, none the same as training."""
        t = self.train_slot_tagger
        train = self.dataset_of_kind(t.dataset or self.c2c.dataset, "slots", "train_slot_tagger.dataset")
        dev = None if t.dev is None else self.dataset_of_kind(t.dev, "slots", "train_slot_tagger.dev")
        test = self.dataset_of_kind(t.test, "slots", "train_slot_tagger.test")
        for key, held in (("dev", dev), ("test", test)):
            if held == train:
                raise ValueError(f"train_slot_tagger.{key}: {held!r} is also the training dataset; hold out another")
        if "original+c2c" in t.arms and self.c2c_dataset() != train:
            raise ValueError(
                f"train_slot_tagger.arms: 'original+c2c' adds C2C's rows of c2c.dataset "
                f"{self.c2c_dataset()!r}, but the tagger trains on {train!r}; make them the same"
            )
        return train, dev, test

    def dataset_of_kind(self, name: str | None, kind: str, key: str) -> str:
        """``name`` if it is a dataset of ``kind``; unset: the profile's only dataset of that kind."""
        kinds = {n: ds.kind for n, ds in self.datasets.items()}
        of_kind = [n for n, k in kinds.items() if k == kind]
        if name is None:
            if len(of_kind) != 1:
                raise ValueError(f"{key}: name the {kind} dataset (the profile has {len(of_kind)}: {of_kind})")
            return of_kind[0]
        if kinds.get(name) != kind:
            found = f"kind {kinds[name]!r}" if name in kinds else "no such dataset"
            raise ValueError(f"{key}: dataset {name!r} must be of kind {kind!r}, found {found}; {kind} datasets: {of_kind}")
        return name

    def rejuvenation_bitext(self) -> str:
        return self.dataset_of_kind(self.rejuvenation.bitext, "bitext", "rejuvenation.bitext")

    def self_training_datasets(self) -> tuple[str, list[str]]:
        """The bitext and the monolingual datasets of the self-training pipeline (named, or the defaults)."""
        st = self.self_training
        bitext = self.dataset_of_kind(st.bitext, "bitext", "self_training.bitext")
        mono = [
            self.dataset_of_kind(m, "mono", "self_training.mono")
            for m in st.mono or [n for n, ds in self.datasets.items() if ds.kind == "mono"]
        ]
        if not mono:
            raise ValueError("self_training.mono: the profile has no dataset of kind 'mono' to sample from")
        return bitext, mono

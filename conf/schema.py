"""The typed configuration: one frozen pydantic model per section, unknown keys refused.

Only ``conf.loader`` reads YAML; every other function receives the typed section it needs.
Later pipelines add their own section here, with the paper's defaults beside their equation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Kind = Literal["bitext", "mono", "labeled", "slots"]
Format = Literal["text", "tsv", "jsonl", "parquet", "hf"]

DEFAULT_CACHE = Path(".augdag")
CACHE_ENV = "AUGDAG_CACHE"


class ConfModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DatasetConf(ConfModel):
    """One input corpus. ``text`` is a single file of lines (``mono``) or a line-aligned pair (``bitext``)."""

    kind: Kind
    format: Format
    path: Path | None = None  # tsv / jsonl / parquet file, a mono text file, or an HF `save_to_disk` dir
    src: Path | None = None  # bitext as two line-aligned text files
    tgt: Path | None = None
    columns: list[str] | None = None  # tsv: the record fields in column order (default: the kind's fields)
    rename: dict[str, str] = {}  # jsonl / parquet / hf: record field -> name in the input
    header: bool = False  # tsv: the first line names the columns and is skipped
    split: str | None = None  # hf: the split of a DatasetDict

    @model_validator(mode="after")
    def _paths_match_format(self) -> "DatasetConf":
        pair = self.format == "text" and self.kind == "bitext"
        if pair and (self.src is None or self.tgt is None or self.path is not None):
            raise ValueError("a bitext in format 'text' needs `src` and `tgt` (two line-aligned files), not `path`")
        if not pair and (self.path is None or self.src is not None or self.tgt is not None):
            raise ValueError(f"format {self.format!r} for kind {self.kind!r} needs `path`, not `src`/`tgt`")
        if self.format == "text" and self.kind not in ("bitext", "mono"):
            raise ValueError(f"format 'text' holds bitext or mono, not {self.kind!r}; use tsv or jsonl")
        return self

    def files(self) -> list[Path]:
        """The input files (or directory) this dataset reads."""
        return [p for p in (self.src, self.tgt, self.path) if p is not None]


class CleanConf(ConfModel):
    """The `clean` stage: the same filter the self-training pipeline applies to synthetic pairs (ch. 6)."""

    dedup: bool = True  # exact-duplicate removal over the whole dataset, first occurrence kept
    min_tokens: int = Field(1, ge=0)  # a side with fewer whitespace tokens is dropped
    max_tokens: int = Field(250, ge=1)  # a side with more whitespace tokens is dropped
    max_ratio: float = Field(1.5, ge=1.0)  # bitext: max(|src|/|tgt|, |tgt|/|src|) in tokens


class IngestConf(ConfModel):
    max_line_chars: int = Field(4096, ge=1)  # a longer line (or field) is rejected
    clean: CleanConf = CleanConf()


class TaskRunnerConf(ConfModel):
    kind: Literal["threads", "processes", "dask"] = "threads"
    max_workers: int | None = Field(None, ge=1)  # threads / processes; None: the number of cores
    address: str | None = None  # dask: a scheduler address; None starts a local cluster
    n_workers: int = Field(2, ge=1)  # dask local cluster


class OrchestrationConf(ConfModel):
    retries: int = Field(2, ge=0)  # per shard task, with exponential backoff
    retry_delay_s: float = Field(1.0, ge=0)
    lock_timeout_s: float = Field(600, gt=0)  # waiting for the catalog's write lock
    heartbeat_s: int | None = Field(None, ge=30)  # Prefect flow heartbeats to a long-lived server; None: off


class DemoConf(ConfModel):
    seed: int = 0
    bitext_rows: int = Field(3000, ge=100)
    mono_rows: int = Field(5000, ge=100)
    labeled_rows: int = Field(1200, ge=100)
    slots_rows: int = Field(1200, ge=100)


class AugdagConf(ConfModel):
    cache: Path = DEFAULT_CACHE  # overridden by AUGDAG_CACHE, then by --cache
    shard_size: int = Field(100_000, ge=1)
    task_runner: TaskRunnerConf = TaskRunnerConf()
    orchestration: OrchestrationConf = OrchestrationConf()
    datasets: dict[str, DatasetConf] = {}
    pipelines: list[Literal["ingest"]] = ["ingest"]  # enabled pipelines, run in this order
    ingest: IngestConf = IngestConf()
    demo: DemoConf = DemoConf()

    @model_validator(mode="after")
    def _dataset_names(self) -> "AugdagConf":
        for name in self.datasets:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"dataset name {name!r}: use letters, digits, '_' and '-'")
        return self


def resolve_cache(
    conf_cache: Path | None, cli_cache: Path | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The cache root: ``--cache`` beats ``AUGDAG_CACHE`` (read from ``environ``, default ``os.environ``)
    beats the profile beats ``.augdag/``."""
    environ = os.environ if environ is None else environ
    if cli_cache is not None:
        return Path(cli_cache)
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    return Path(conf_cache) if conf_cache is not None else DEFAULT_CACHE

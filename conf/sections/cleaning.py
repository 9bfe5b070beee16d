"""Cleaning settings: the `clean` stage's section (``ingest.clean``) and a dataset's own ``clean:``.

    datasets:
      news:     {..., clean: false}            # read and validated, never deduplicated or length/ratio filtered
      crawl:    {..., clean: {max_ratio: 3}}   # ingest.clean, with max_ratio replaced for this dataset

A held-out test or dev set is never cleaned, whatever ``ingest.clean`` says (conf/roles.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidatorFunctionWrapHandler, WrapSerializer, WrapValidator

from conf.base import ConfModel


class CleanConf(ConfModel):
    """The `clean` stage: the same filter the self-training pipeline applies to synthetic pairs (ch. 6)."""

    dedup: bool = True  # exact-duplicate removal over the whole dataset, first occurrence kept
    min_tokens: int = Field(1, ge=0)  # a side with fewer whitespace tokens is dropped
    max_tokens: int = Field(250, ge=1)  # a side with more whitespace tokens is dropped
    max_ratio: float = Field(1.5, ge=1.0)  # bitext: max(|src|/|tgt|, |tgt|/|src|) in tokens


class CleanOverride(ConfModel):
    """A dataset's ``clean: {...}``: each key given replaces ``ingest.clean``'s for that dataset."""

    dedup: bool | None = None
    min_tokens: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    max_ratio: float | None = Field(None, ge=1.0)


def _false_or_mapping(value: Any, validate: ValidatorFunctionWrapHandler) -> Any:
    """``false`` as it is; a mapping validated as `CleanOverride` (its errors name its keys); else ValueError."""
    if value is False:
        return value
    if value is None or isinstance(value, (dict, CleanOverride)):
        return validate(value)
    raise ValueError(f"expected false (no cleaning) or a mapping of ingest.clean's keys ({', '.join(CleanConf.model_fields)})")


# typed as the mapping (the loader's error messages list its keys); false passes the validator as it is
DatasetClean = Annotated[
    CleanOverride | None,
    WrapValidator(_false_or_mapping),
    WrapSerializer(lambda value, dump: value if value is False else dump(value)),
]


def dataset_clean(section: CleanConf, own: CleanOverride | Literal[False] | None) -> CleanConf | None:
    """The settings a dataset is cleaned with: ``section`` (``ingest.clean``) with the dataset's own keys
    replaced; None for ``clean: false`` (not cleaned)."""
    if own is False:
        return None
    if own is None:
        return section
    given = {k: v for k, v in own.model_dump().items() if v is not None}
    return CleanConf.model_validate({**section.model_dump(), **given})

"""Cleaning settings: the `clean` stage's section (``ingest.clean``) and a dataset's own ``clean:``.

    datasets:
      news:     {..., clean: false}            # read and validated, never deduplicated or length/ratio filtered
      crawl:    {..., clean: {max_ratio: 3}}   # ingest.clean, with max_ratio replaced for this dataset

Beside duplicates, tokens and ratio, ``clean`` holds the corpus filters of issue 28, each off unless its key is
given (conf/sections/filters.py), or named by a preset (issue 47): ``preset: recommended`` switches on the settings
below, which drop at most 1 % of professionally translated pairs and catch at least 95 % of each kind of noise
bench/filters.py plants (bench/filter_quality.py measures both); ``preset: opusfilter`` the nine row filters at
OpusFilter's own defaults (over all of py3langid's 97 languages), for parity. A filter the block also names is the
preset's value with the given keys replaced (``false``: off); ``max_ratio`` given replaces the preset's. A held-out
test or dev set is never cleaned, whatever ``ingest.clean`` says (conf/roles.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidatorFunctionWrapHandler, WrapSerializer, WrapValidator, model_serializer, model_validator

from conf.base import ConfModel
from conf.roles import evaluation_datasets
from conf.sections.filters import ACROSS_FILTERS, FILTERS, ROW_FILTERS, FilterOverrides, RowFilters, resolved

# Measured by bench/filter_quality.py on WMT21 news de-en (1,000 professional pairs) and Multi30k with planted noise:
RECOMMENDED: dict[str, Any] = {
    "max_ratio": 3.0,  # tokens; WMT21: 41 correct pairs above 1.5, 4 above 2, none above 2.5
    "long_word": {},
    "alphabet_ratio": {"exclude_whitespace": True, "threshold": 0.5},  # digits, not spaces, count against (0.75: 2)
    "character_score": {},
    "html_tags": {},
    "terminal_punctuation": {},
    "non_zero_numerals": {"threshold": 0.7, "ordered": False, "skip_one_sided": True},  # 4 false; 97.6 % of noise
    "repetition": {"unit": "word", "threshold": 1, "min_length": 1, "max_length": 10},  # "die die": 1 in 1,000
    "language_id": {"min_chars": 25},  # candidates: the bitext's two languages; short sides: see language_id.py
}
OPUSFILTER: dict[str, Any] = {f: {} for f in ROW_FILTERS} | {"language_id": {"langid_languages": "all"}}
PRESETS = {"recommended": RECOMMENDED, "opusfilter": OPUSFILTER}
Preset = Literal["recommended", "opusfilter"]


def with_preset(name: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (a clean block's keys) over preset ``name``'s: a filter it names as a mapping is the preset's with
    those keys replaced, ``true`` the preset's, ``false`` or null off; a key it does not name is the preset's."""
    out = dict(given)
    for key, value in PRESETS[name].items() if name else ():
        mine = given.get(key)
        if key not in given or mine is True:
            out[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            out[key] = {**value, **mine}
    return out


class TokenFilter(ConfModel):
    """The filter the self-training pipeline applies to synthetic pairs (ch. 6): duplicates, tokens, ratio."""

    dedup: bool = True  # exact-duplicate removal over the whole dataset, first occurrence kept
    min_tokens: int = Field(1, ge=0)  # a side with fewer whitespace tokens is dropped
    max_tokens: int = Field(250, ge=1)  # a side with more whitespace tokens is dropped
    max_ratio: float = Field(1.5, ge=1.0)  # bitext: max(|src|/|tgt|, |tgt|/|src|) in tokens


class CleanConf(RowFilters, TokenFilter):
    """The `clean` stage: ``TokenFilter``, then the corpus filters that are on (conf/sections/filters.py), those of
    ``preset`` filled in (``with_preset``). The dump leaves ``preset`` out when there is none."""

    preset: Preset | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") in PRESETS:
            return with_preset(data["preset"], data)
        return data

    @model_serializer(mode="wrap")
    def _off_left_out(self, dump: Any) -> dict[str, Any]:
        """RowFilters' dump; with a preset, its filters that are off as false (so a reload keeps them off)."""
        out = {k: v for k, v in dump(self).items() if not (k in FILTERS and v is None)}
        if not self.preset:
            return {k: v for k, v in out.items() if k != "preset"}
        return out | {f: False for f in PRESETS[self.preset] if f in FILTERS and getattr(self, f) is None}


class IngestConf(ConfModel):
    """The `ingest` section: the longest line a read accepts, and how datasets are cleaned."""

    max_line_chars: int = Field(4096, ge=1)  # a longer line (or field) is rejected
    clean: CleanConf = CleanConf()


class TokenOverride(ConfModel):
    dedup: bool | None = None
    min_tokens: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    max_ratio: float | None = Field(None, ge=1.0)


class CleanOverride(FilterOverrides, TokenOverride):
    """A dataset's ``clean: {...}``: each key given replaces ``ingest.clean``'s for that dataset (a filter: its whole
    value; ``false`` switches it off); ``preset``: each of the preset's keys too, merged with the block's own
    (``dataset_clean``); a filter the preset names that does not apply to the dataset's kind is skipped."""

    preset: Preset | None = None


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
    if own.preset:  # its filters' values as the preset's with the keys the block sets replaced
        mine = {k: v for k, v in own.model_dump(exclude_unset=True).items() if v is not None and k != "preset"}
        given = with_preset(own.preset, mine) | {"preset": own.preset}
    return CleanConf.model_validate({**section.model_dump(), **given})


def own_filters(own: CleanOverride | Literal[False] | None) -> set[str]:
    """The filters a dataset's own ``clean:`` sets (on or off)."""
    return {f for f in FILTERS if isinstance(own, CleanOverride) and getattr(own, f) is not None}


def check_filters(conf: Any) -> None:
    """The profile-wide check of the filters: ``src_lang``/``tgt_lang`` only on a bitext; each cleaned dataset's
    filters have the languages they need (``resolved``); near_duplicates and decontaminate, which run across
    datasets, have one setting; decontaminate has a held-out set to compare with. ValueError naming the key."""
    held = evaluation_datasets(conf)
    across: dict[str, tuple[str, Any]] = {}  # filter -> (the first dataset that runs it, its setting)
    for name, ds in conf.datasets.items():
        for key in ("src_lang", "tgt_lang"):
            if getattr(ds, key) is not None and ds.kind != "bitext":
                raise ValueError(f"datasets.{name}.{key}: names a bitext's side; this one is kind {ds.kind!r}: use `language`")
        settings = None if name in held else dataset_clean(conf.ingest.clean, ds.clean)
        if settings is None:
            continue
        own = own_filters(ds.clean)
        for f, section in resolved(settings, ds, name, own).items():
            if f not in ACROSS_FILTERS:
                continue
            first, setting = across.setdefault(f, (name, section))
            if setting != section:
                where = f"datasets.{name}.clean.{f}" if f in own else f"ingest.clean.{f}"
                raise ValueError(
                    f"{where}: runs across datasets with one setting, but {first!r} and {name!r} set it differently. "
                    f"Hint: set it once in ingest.clean (a dataset can still leave it: `{f}: false`)"
                )
    tests = [n for n in held if conf.datasets.get(n) is not None and conf.datasets[n].kind != "slots"]
    if "decontaminate" in across and not tests:
        raise ValueError(
            "ingest.clean.decontaminate: the profile holds out no test or dev set of text (train_nmt.tests, "
            "train_classifier.test, epida.test, ...) to compare the training rows with"
        )

"""The corpus filters of ``clean`` (issue 28): one key each, its parameters as the value, OpusFilter's names and defaults.

    ingest:
      clean:                                  # every dataset that is cleaned (a held-out set never is)
        language_id: {threshold: 0.3}         # LanguageIDFilter; the languages: src_lang/tgt_lang (or language)
        character_score: {}                   # CharacterScoreFilter; the scripts: from the languages (or scripts:)
        non_zero_numerals: {}                 # NonZeroNumeralsFilter
        near_duplicates: {threshold: 0.8}     # MinHash LSH across every training dataset of the profile
        decontaminate: {}                     # drop rows that are (near) copies of a held-out set's lines
    datasets:
      crawl: {..., src_lang: en, tgt_lang: de, clean: {language_id: false}}   # false: off for this dataset

A filter is off when its key is absent, null or ``false``; ``{}`` (or ``true``) switches it on with its defaults.
A dataset's own ``clean:`` replaces a filter's whole value (conf/sections/cleaning.py). Per kind (``APPLIES``):
a bitext runs every filter, each per-side one on both sides; mono and labeled rows (one ``text``) all but the two
that compare sides (terminal_punctuation, non_zero_numerals); slots rows (token lists) only ``length``, over their
tokens; near_duplicates and decontaminate leave slots datasets out, as training rows and as test sets. A filter
set in ``ingest.clean`` is skipped where it does not apply; set in a dataset's own ``clean:``, that is an error.
``check_filters`` (conf/sections/cleaning.py) is the profile-wide check; ``resolved`` fills in each side's language
and script.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    WrapSerializer,
    WrapValidator,
    model_serializer,
    model_validator,
)

from conf.base import ConfModel


def check_language_code(code: Any) -> Any:
    """``code`` if it is two lower-case letters (an ISO 639-1 code), else ValueError saying what is expected."""
    if isinstance(code, str) and not re.fullmatch(r"[a-z]{2}", code):
        raise ValueError("expected an ISO 639-1 code such as en, de (two lower-case letters)")
    return code


LanguageCode = Annotated[str, BeforeValidator(check_language_code)]  # ISO 639-1


@functools.cache
def check_script(name: str) -> str:
    """``name`` if the ``regex`` module knows ``\\p{Script=name}`` (Latin, Cyrillic, Greek, Han, ...), else ValueError."""
    import regex

    try:
        regex.compile(rf"\p{{Script={name}}}")
    except regex.error:
        raise ValueError(f"unknown Unicode script {name!r}; expected one such as Latin, Cyrillic, Greek, Han") from None
    return name


Script = Annotated[str, Field(pattern=r"^[A-Za-z_]+$"), BeforeValidator(lambda v: check_script(v) if isinstance(v, str) else v)]


class LanguageIdConf(ConfModel):
    """``LanguageIDFilter``: kept iff the identifier's confidence in the side's language is above ``threshold``.

    ``langid_languages``: the candidates; by default a bitext's own two languages (over all 97 of py3langid,
    "Best regards" is Icelandic at 0.04), a mono or labeled dataset's all the identifier knows (one candidate
    would always win); ``all``: every language the identifier knows, OpusFilter's default. ``min_chars``: a side
    shorter than this many characters is never dropped on its language (0: OpusFilter's rule, every side is)."""

    threshold: float = Field(0.0, ge=0, le=1)
    identifier: Literal["py3langid", "lingua"] = "py3langid"
    langid_languages: list[LanguageCode] | Literal["all"] | None = None
    lingua_mode: Literal["low", "high"] = "low"
    languages: list[LanguageCode] | None = None  # one per side; default: the dataset's src_lang, tgt_lang (language)
    min_chars: int = Field(0, ge=0)


class CharacterScoreConf(ConfModel):
    """``CharacterScoreFilter``: of a side's letters, the share in its script must be >= ``threshold``."""

    threshold: float = Field(1.0, ge=0, le=1)
    scripts: list[Script] | None = None  # one per side; default: the script of each side's language (SCRIPTS)


class AlphabetRatioConf(ConfModel):
    """``AlphabetRatioFilter``: the share of letters in a side must be >= ``threshold``."""

    threshold: float = Field(0.75, ge=0, le=1)
    exclude_whitespace: bool = False


class LongWordConf(ConfModel):
    """``LongWordFilter``: a side's longest word must be shorter than ``threshold`` characters."""

    threshold: int = Field(40, ge=1)


class HtmlTagsConf(ConfModel):
    """``HtmlTagFilter``: no side may hold an HTML tag (BeautifulSoup's html.parser)."""


class TerminalPunctuationConf(ConfModel):
    """``TerminalPunctuationFilter``: -log(|s − t| + max(s − 1, 0) + max(t − 1, 0) + 1) >= ``threshold``."""

    threshold: float = -2.0


class NonZeroNumeralsConf(ConfModel):
    """``NonZeroNumeralsFilter``: difflib's ratio of the sides' digits 1-9 must be >= ``threshold``. Beyond
    OpusFilter: ``ordered: false`` sorts each side's digits first (a translation moves its numbers: "um 21.30 Uhr
    ein 44-Jähriger" / "at 21:30 a 44-year-old"); ``skip_one_sided: true`` keeps a pair where only one side has a
    digit (the other wrote the number as a word: "sieben Punkte" / "7 points", "9pm" / "21 Uhr" has both)."""

    threshold: float = Field(0.5, ge=0, le=1)
    ordered: bool = True
    skip_one_sided: bool = False


class RepetitionConf(ConfModel):
    """``RepetitionFilter``: fewer than ``threshold`` repeats of a ``min_length``..``max_length`` substring
    (``unit: char``, OpusFilter's); ``unit: word``: of a run of ``min_length``..``max_length`` whole words, each
    repeat right after the last ("A man sits. A A" repeats "A" once)."""

    threshold: int = Field(2, ge=1)
    min_length: int = Field(3, ge=1)
    max_length: int = Field(100, ge=1)
    unit: Literal["char", "word"] = "char"

    @model_validator(mode="after")
    def _lengths(self) -> RepetitionConf:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length ({self.min_length}) exceeds max_length ({self.max_length})")
        return self


class LengthConf(ConfModel):
    """``LengthFilter``: each side has ``min_length`` to ``max_length`` words (or characters: ``unit: char``)."""

    min_length: int = Field(1, ge=0)
    max_length: int = Field(100, ge=1)
    unit: Literal["word", "char"] = "word"


class NearDuplicatesConf(ConfModel):
    """MinHash LSH (tasks/ingest/near_duplicates.py): a row whose exact Jaccard similarity to an earlier kept row
    (by source, line) of any training dataset is >= ``threshold`` is dropped."""

    shingle: Literal["char", "word"] = "char"
    n: int = Field(5, ge=1)  # characters or words per shingle
    num_perm: int = Field(128, ge=2)
    threshold: float = Field(0.8, gt=0, lt=1)
    seed: int = 1


class DecontaminateConf(NearDuplicatesConf):
    """A training row whose side equals a held-out set's line after ``normalise``, or has a Jaccard similarity >=
    ``threshold`` to one (the same MinHash LSH), is dropped as ``test_overlap``."""

    threshold: float = Field(0.8, gt=0, le=1)  # 1: only the lines equal after normalising


def _switch(value: Any) -> Any:
    """``false`` is off (None), ``true`` on with the defaults ({})."""
    return None if value is False else {} if value is True else value


def _on(model: type[ConfModel]) -> Any:
    return Annotated[model | None, BeforeValidator(_switch)]


def _false_or(value: Any, validate: ValidatorFunctionWrapHandler) -> Any:
    """``false`` as it is (off for this dataset), ``true`` as {}, else the filter's section (its errors name its keys)."""
    return value if value is False else validate({} if value is True else value)


def _own(model: type[ConfModel]) -> Any:
    # typed as the section (errors name its keys); false passes the validator as it is
    return Annotated[
        model | None, WrapValidator(_false_or), WrapSerializer(lambda value, dump: value if value is False else dump(value))
    ]


class RowFilters(ConfModel):
    """Each filter of the chain, cheapest first, and the two filters across datasets; None: off. Its dump leaves
    out the filters that are off, so a section without them dumps (and fingerprints) as before they existed."""

    length: _on(LengthConf) = None
    long_word: _on(LongWordConf) = None
    alphabet_ratio: _on(AlphabetRatioConf) = None
    character_score: _on(CharacterScoreConf) = None
    html_tags: _on(HtmlTagsConf) = None
    terminal_punctuation: _on(TerminalPunctuationConf) = None
    non_zero_numerals: _on(NonZeroNumeralsConf) = None
    repetition: _on(RepetitionConf) = None
    language_id: _on(LanguageIdConf) = None
    near_duplicates: _on(NearDuplicatesConf) = None
    decontaminate: _on(DecontaminateConf) = None

    @model_serializer(mode="wrap")
    def _off_left_out(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in dump(self).items() if not (k in FILTERS and v is None)}


class FilterOverrides(ConfModel):
    """A dataset's own filters (``datasets.X.clean``): None is not given (``ingest.clean``'s applies), false off."""

    length: _own(LengthConf) = None
    long_word: _own(LongWordConf) = None
    alphabet_ratio: _own(AlphabetRatioConf) = None
    character_score: _own(CharacterScoreConf) = None
    html_tags: _own(HtmlTagsConf) = None
    terminal_punctuation: _own(TerminalPunctuationConf) = None
    non_zero_numerals: _own(NonZeroNumeralsConf) = None
    repetition: _own(RepetitionConf) = None
    language_id: _own(LanguageIdConf) = None
    near_duplicates: _own(NearDuplicatesConf) = None
    decontaminate: _own(DecontaminateConf) = None


ROW_FILTERS = tuple(RowFilters.model_fields)[:9]  # the chain's order, after clean's own reasons
ACROSS_FILTERS = ("decontaminate", "near_duplicates")  # across datasets, in this order, after the chain
FILTERS = (*ROW_FILTERS, *ACROSS_FILTERS)
PER_SIDE = ("length", "long_word", "alphabet_ratio", "character_score", "html_tags", "language_id")
ONE_TEXT = tuple(f for f in FILTERS if f not in ("terminal_punctuation", "non_zero_numerals"))
APPLIES = {"bitext": FILTERS, "mono": ONE_TEXT, "labeled": ONE_TEXT, "slots": ("length",)}
REASONS = {f: f for f in FILTERS} | {"decontaminate": "test_overlap"}  # a drop's `reason`
LANGUAGES = {"bitext": ("src_lang", "tgt_lang"), "mono": ("language",), "labeled": ("language",)}

_LATIN = "af br bs ca cs cy da de en eo es et eu fi fo fr fy ga gd gl hr ht hu id is it la lb lt lv mg ms mt nb nl nn no oc"
_LATIN += " pl pt qu ro rw sk sl so sq sv sw tl tr vi wa xh yo zu"
SCRIPTS = (  # a language's script, for character_score without `scripts` (not for a language written in several)
    dict.fromkeys(_LATIN.split(), "Latin")
    | dict.fromkeys(["be", "bg", "kk", "ky", "mk", "mn", "ru", "tg", "uk"], "Cyrillic")
    | dict.fromkeys(["ar", "fa", "ps", "ur"], "Arabic")
    | dict.fromkeys(["hi", "mr", "ne"], "Devanagari")
    | {"el": "Greek", "he": "Hebrew", "yi": "Hebrew", "hy": "Armenian", "ka": "Georgian", "th": "Thai", "ko": "Hangul"}
    | {"zh": "Han", "bn": "Bengali", "ta": "Tamil", "te": "Telugu", "kn": "Kannada", "ml": "Malayalam", "gu": "Gujarati"}
    | {"pa": "Gurmukhi", "si": "Sinhala", "km": "Khmer", "lo": "Lao", "my": "Myanmar", "am": "Ethiopic"}
)


def dataset_languages(ds: Any) -> list[str | None]:
    """Each side's language as the dataset names it (bitext: src_lang, tgt_lang; mono, labeled: ``language`` when
    it is given, not its default); [] for slots."""
    keys = LANGUAGES.get(ds.kind, ())
    return [getattr(ds, k) if k in ds.model_fields_set else None for k in keys]


def resolved(filters: RowFilters, ds: Any, name: str, own: Collection[str] = ()) -> dict[str, Any]:
    """The filters that apply to dataset ``name`` (kind ``ds.kind``), each side's language and script filled in:
    {filter: its section}. ``own``: the filters the dataset's own ``clean:`` sets (their errors name
    ``datasets.X.clean.<filter>``, the others ``ingest.clean.<filter>``). ValueError for a filter that needs a
    language the dataset does not name, a per-side list of the wrong length, or (its own) a filter of another kind."""
    languages, sides = dataset_languages(ds), max(len(LANGUAGES.get(ds.kind, ())), 1)
    out: dict[str, Any] = {}
    for f in FILTERS:
        section, key = getattr(filters, f), f"datasets.{name}.clean.{f}" if f in own else f"ingest.clean.{f}"
        if section is None:
            continue
        if f not in APPLIES[ds.kind]:
            if f in own:
                raise ValueError(f"{key}: does not apply to kind {ds.kind!r} (it applies to {_kinds(f)})")
            continue
        if f == "language_id":
            langs = _per_side(section.languages, languages, sides, name, ds, key)
            candidates = section.langid_languages
            if candidates is None and len(langs) == 2:  # a bitext: its own two languages
                candidates = list(langs) if len(set(langs)) == 2 else "all"
            section = section.model_copy(update={"languages": langs, "langid_languages": candidates})
        elif f == "character_score" and section.scripts is None:
            codes = _per_side(None, languages, sides, name, ds, key)
            if unknown := [c for c in codes if c not in SCRIPTS]:
                raise ValueError(
                    f"{key}: no script is known for language {unknown[0]!r} of dataset {name!r}; give "
                    f"`scripts: [...]` (one per side, e.g. [Latin, Cyrillic])"
                )
            section = section.model_copy(update={"scripts": [SCRIPTS[c] for c in codes]})
        elif f == "character_score" and len(section.scripts) != sides:
            raise ValueError(f"{key}.scripts: expected {sides} (one per side of {name!r}), found {len(section.scripts)}")
        out[f] = section
    return out


def _per_side(given: list[str] | None, languages: list[str | None], sides: int, name: str, ds: Any, key: str) -> list[str]:
    """The languages of the sides: ``given`` (checked: one per side), else the dataset's (checked: all named)."""
    if given is not None:
        if len(given) != sides:
            raise ValueError(f"{key}.languages: expected {sides} (one per side of {name!r}), found {len(given)}")
        return list(given)
    if None in languages:
        keys = " and ".join(f"`{k}`" for k in LANGUAGES[ds.kind])
        raise ValueError(
            f"{key}: dataset {name!r} (kind {ds.kind}) names no language; set {keys} (ISO 639-1) on "
            f"datasets.{name}, or switch the filter off for it (datasets.{name}.clean.{key.rsplit('.', 1)[1]}: false)"
        )
    for k, code in zip(LANGUAGES[ds.kind], languages, strict=True):
        if not re.fullmatch(r"[a-z]{2}", str(code)):
            raise ValueError(f"datasets.{name}.{k}: expected an ISO 639-1 code such as en, de, found {code!r}")
    return [str(code) for code in languages]


def _kinds(f: str) -> str:
    return ", ".join(k for k, fs in APPLIES.items() if f in fs)

"""The `synthetic_clean` stage: what a teacher's translations go through before the target LM (thesis ch. 6, and
issue 47's weak teacher, whose "„Wir, dass es es, dass es, dass es…" was kept).

    duplicate → too_few_tokens → too_many_tokens → length_ratio      (the `clean` stage's rules, tasks/ingest/clean.py)
    → repetition → repeated_ngram → language_id                       (on the target side, the teacher's output)

Each pair gets the first reason that applies, and each check scores only the pairs every earlier one kept:

- ``repetition``: OpusFilter's RepetitionFilter (tasks/ingest/filters.py ``repetition``, or ``word_repetition`` for
  ``unit: word``): a substring of ``min_length``..``max_length`` characters followed ``threshold`` more times by itself.
- ``repeated_ngram``: a degenerate output, one n-gram of 1..``max_n`` words repeated ``times`` or more times in a row
  over the lower-cased words (``\\w+``: punctuation between the copies does not hide them). "es es es" and "dass es,
  dass es. dass es…" are such runs; the character rule needs 3-character copies each followed by the same spaces.
- ``language_id``: py3langid (or lingua) on the target side, kept iff its confidence in the target language is above
  ``threshold`` (tasks/ingest/language_id.py); the candidates are the bitext's two languages when both are known.

The ``detail`` of a drop: ``repetition=2 ('dass es, ')``, ``repeated_ngram=3 ('dass es')``, ``language_id=en:1``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.schema import AugdagConf, SelfTrainingConf
from conf.sections.filters import LanguageIdConf, RepetitionConf
from conf.sections.nmt import RepeatedNgramConf
from tasks.ingest import filters as F
from tasks.ingest.clean import clean
from tasks.ingest.language_id import language_id
from tasks.runtime.stage import Stage

WORD = re.compile(r"\w+")
CHECKS = ("repetition", "repeated_ngram", "language_id")  # the order they run in, after clean's reasons


def repeated_ngram_run(text: str, *, max_n: int = 4) -> tuple[int, str | None]:
    """The longest run of one n-gram (n = 1..``max_n`` words of ``text``, lower-cased, ``\\w+``) repeated in a row:
    (its copies, the n-gram); (1, None) for a text without a repeat, (0, None) for one without words.

    >>> repeated_ngram_run("„Wir, dass es es, dass es, dass es, dass es")
    (3, 'es dass')
    """
    words = WORD.findall(text.lower())
    best: tuple[int, str | None] = (1 if words else 0, None)
    for n in range(1, max_n + 1):
        for i in range(len(words) - 2 * n + 1):
            gram, copies = words[i : i + n], 1
            while words[i + copies * n : i + (copies + 1) * n] == gram:
                copies += 1
            if copies > best[0]:
                best = (copies, " ".join(gram))
    return best


def repeated_ngram(column: pa.Array, *, max_n: int = 4, times: int = 3) -> F.Scored:
    """Per row, the copies of the longest n-gram run (``repeated_ngram_run``); kept iff fewer than ``times``."""
    runs = [repeated_ngram_run(text or "", max_n=max_n) for text in column.to_pylist()]
    copies = np.array([c for c, _ in runs], np.int64)
    keep = copies < times
    return F.scored("repeated_ngram", keep, copies, {i: f" ({runs[i][1]!r})" for i in np.flatnonzero(~keep).tolist()})


def check_target(
    tgt: pa.Array,
    *,
    repetition: RepetitionConf | None,
    repeated: RepeatedNgramConf | None,
    language: LanguageIdConf | None,
    tgt_lang: str | None,
    candidates: list[str] | None,
) -> dict[int, tuple[str, str]]:
    """The rows of ``tgt`` that a check drops, each with its (reason, detail): the first of ``CHECKS`` that is on
    (``language`` only with a ``tgt_lang``) and drops it; each check scores only the rows the earlier ones kept."""
    kept = np.arange(len(tgt))
    drops: dict[int, tuple[str, str]] = {}
    for name in CHECKS:
        if not len(kept):
            break
        column = pc.fill_null(pc.take(tgt, pa.array(kept, pa.int64())), "")
        if name == "repetition" and repetition is not None:
            rule = F.word_repetition if repetition.unit == "word" else F.repetition
            verdict = rule(
                [column], threshold=repetition.threshold, min_length=repetition.min_length, max_length=repetition.max_length
            )
        elif name == "repeated_ngram" and repeated is not None:
            verdict = repeated_ngram(column, max_n=repeated.max_n, times=repeated.times)
        elif name == "language_id" and language is not None and tgt_lang is not None:
            verdict = language_id(
                column,
                language=tgt_lang,
                threshold=language.threshold,
                identifier=language.identifier,
                langid_languages=None if language.langid_languages == "all" else (language.langid_languages or candidates),
                lingua_mode=language.lingua_mode,
                min_chars=language.min_chars,
            )
        else:
            continue
        for j in np.flatnonzero(~verdict.keep).tolist():
            drops[int(kept[j])] = (name, str(verdict.detail[j]))
        kept = kept[verdict.keep]
    return drops


def synthetic_clean(
    rows: pa.Table,
    duplicates: pa.Table,
    *,
    dedup: bool = True,
    min_tokens: int = 1,
    max_tokens: int = 250,
    max_ratio: float = 1.5,
    repetition: RepetitionConf | None = None,
    repeated_ngram: RepeatedNgramConf | None = None,
    language_id: LanguageIdConf | None = None,
    tgt_lang: str | None = None,
    candidates: list[str] | None = None,
) -> dict[str, pa.Table]:
    """``clean`` (tasks/ingest/clean.py) of the synthetic pairs (src, tgt), then the target-side checks
    (``check_target``) on the pairs it kept. Returns ``{"part": kept, "dropped": dropped + reason + detail}``;
    kept + dropped = rows, the dropped in clean's order, then the checks' in row order."""
    cleaned = clean(
        rows, duplicates, kind="bitext", dedup=dedup, min_tokens=min_tokens, max_tokens=max_tokens, max_ratio=max_ratio
    )
    part = cleaned["part"]
    drops = check_target(
        part["tgt"].combine_chunks(),
        repetition=repetition,
        repeated=repeated_ngram,
        language=language_id,
        tgt_lang=tgt_lang,
        candidates=candidates,
    )
    if not drops:
        return cleaned
    at = sorted(drops)
    dropped = np.zeros(part.num_rows, dtype=bool)
    dropped[at] = True
    more = (
        part.take(pa.array(at, pa.int64()))
        .append_column("reason", pa.array([drops[i][0] for i in at], pa.string()))
        .append_column("detail", pa.array([drops[i][1] for i in at], pa.string()))
    )
    return {"part": part.filter(pa.array(~dropped)), "dropped": pa.concat_tables([cleaned["dropped"], more])}


def check_params(checks: Any, *, tgt_lang: str | None, candidates: list[str] | None) -> dict[str, Any]:
    """The stage's parameters for the checks of a ``TeacherOutputChecks`` section: each that is on, dumped (one that
    is off is left out, so its fingerprint is that of a section without it), with the target language."""
    params: dict[str, Any] = {name: getattr(checks, name).model_dump() for name in CHECKS if getattr(checks, name) is not None}
    if "language_id" in params and tgt_lang is not None:
        params |= {"tgt_lang": tgt_lang, "candidates": candidates}
    else:
        params.pop("language_id", None)
    return params


def target_language(conf: AugdagConf) -> tuple[str | None, list[str] | None]:
    """The language the teacher translates into, for the synthetic pairs' language_id: the bitext's ``tgt_lang``, else
    the teacher's ``tgt_lang`` when it is an ISO 639-1 code (an NLLB code such as ``deu_Latn`` is not py3langid's),
    unless ``filter.language_id.languages`` names it (its last entry);
    and the identifier's candidates: the bitext's two languages when both are known (None: every language it knows)."""
    bitext = conf.datasets[conf.self_training_datasets()[0]]
    teacher, lid = conf.self_training.teacher.tgt_lang, conf.self_training.filter.language_id
    tgt = bitext.tgt_lang or (teacher if teacher and len(teacher) == 2 and teacher.islower() else None)
    if lid is not None and lid.languages:  # given: [tgt] or [src, tgt]
        tgt = lid.languages[-1]
    both = [bitext.src_lang, bitext.tgt_lang] if bitext.src_lang and bitext.tgt_lang else None
    return tgt, both


def synthetic_language(conf: SelfTrainingConf, tgt_lang: str | None) -> str:
    """What the synthetic pairs' language_id checked, in words for the summary."""
    if conf.filter.language_id is None:
        return "off (self_training.filter.language_id: false)"
    if tgt_lang is None:
        return "skipped: no target language known (set the bitext's tgt_lang, or self_training.teacher.tgt_lang)"
    return f"target side in {tgt_lang!r}"


# version 3 (of `clean`'s 2): repetition, repeated_ngram and language_id on the teacher's output
SYNTHETIC_CLEAN = Stage("synthetic_clean", "3", synthetic_clean)
